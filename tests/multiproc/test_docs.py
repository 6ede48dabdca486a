"""The docs cannot rot: every command shown in README.md and docs/*.md is checked against the code.

* a ``bench`` command (also inside srun, torchrun, docker run, apptainer exec, ...) must parse with the real
  CLI: every subcommand, option and value type exists as written (parsed, not run);
* a ``make`` target must exist in the Makefile; a ``python -m tools.<tool>`` must exist and answer ``--help``;
* every other command (docker, sbatch, apptainer, pip, ...) must be listed in RUN_BY with the test or make
  target that runs it, and that test must exist. A new command in the docs fails here until it is covered.
"""

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.unit.test_docs import COMMANDS, INLINE, RUN_BY, bench_args, parse_with_cli, words

# Commands the docs show that no test here can run, and why. Listed, so that none is silently unchecked.
NOT_RUN_HERE = {
    "apptainer exec --nv": "no GPU here; `apptainer exec` runs in tests/system/test_apptainer.py",
    "apptainer run --nv": "no GPU here; `apptainer exec` runs in tests/system/test_apptainer.py",
    "srun -N2": "GPUs per node: none here; `srun -N2 -n2` across two container nodes runs in "
                "tests/system/test_cluster.py",
    "srun --mpi=pmix -N2": "GPUs per node: none here; `srun -N2 --mpi=pmix` runs in tests/system/test_cluster.py",
    "kubectl": "no Kubernetes control plane here: tests/unit/test_kubernetes.py checks the manifests offline and "
               "tests/system/test_kubernetes_pods.py starts their pods as the operators would",
}
LAUNCHERS = {"srun", "torchrun", "horovodrun", "mpirun", "salloc"}


@pytest.mark.parametrize("where, cmd", COMMANDS, ids=[f"{f}:{c[:60]}" for f, c in COMMANDS])
def test_doc_command(where, cmd):
    argv = words(cmd)
    if argv[0] == "make":
        targets = set(re.findall(r"^([a-zA-Z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
        assert argv[1] in targets, f"{where}: make {argv[1]} is not a Makefile target"
        return
    if argv[0] == "python" and argv[1:2] == ["-m"] and argv[2].startswith("tools."):
        r = subprocess.run([sys.executable, "-m", argv[2], "--help"], capture_output=True, text=True, cwd=ROOT,
                           timeout=60)
        assert r.returncode == 0, f"{where}: python -m {argv[2]} --help failed: {r.stderr[-500:]}"
        return
    args = bench_args(argv)
    if args is not None:
        parse_with_cli(args)  # raises on an unknown command, option or a value of the wrong type
        if argv[0] == "bench" or argv[0] not in LAUNCHERS | {"docker", "apptainer", "singularity"}:
            return
    line = " ".join(argv)
    if any(line.startswith(k) for k in NOT_RUN_HERE):
        pytest.skip(next(why for k, why in NOT_RUN_HERE.items() if line.startswith(k)))
    key = next((k for k in RUN_BY if line.startswith(k)), None)
    assert key, f"{where}: '{cmd}' is run by no test or make target: add one, and list it in RUN_BY"


def tool_module(span: str) -> str | None:
    """The module an inline tool command runs: ``python -m tools.X ...`` or ``tools/X.py ...``."""
    argv = words(span)
    if argv[:2] == ["python", "-m"]:
        return argv[2]
    if argv[0].startswith("tools/") and argv[0].endswith(".py"):
        return argv[0][:-3].replace("/", ".")
    return None


TOOL_SPANS: dict[str, list[tuple[str, str]]] = {}
for _where, _span in INLINE:
    if (_module := tool_module(_span)) is not None:
        TOOL_SPANS.setdefault(_module, []).append((_where, _span))


@pytest.mark.parametrize("module", sorted(TOOL_SPANS))
def test_inline_tool_commands_take_the_flags_the_prose_gives_them(module):
    """Issue 69: `python -m tools.benchmarks.apptainer --sif ... --sbatch` in the prose named a flag the tool does
    not have (it takes --parts sbatch). Every flag an inline tool command shows is in that tool's --help."""
    r = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=ROOT,
                       timeout=60)
    assert r.returncode == 0, f"python -m {module} --help failed: {r.stderr[-500:]}"
    for where, span in TOOL_SPANS[module]:
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", span):
            assert flag in r.stdout, f"{where}: `{span}`: {module} has no {flag}"
