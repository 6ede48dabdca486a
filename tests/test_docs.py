"""The docs cannot rot: every command shown in README.md and docs/*.md is checked against the code.

* a ``bench`` command (also inside srun, torchrun, docker run, apptainer exec, ...) must parse with the real
  CLI: every subcommand, option and value type exists as written (parsed, not run);
* a ``make`` target must exist in the Makefile; a ``python <script>`` must exist and answer ``--help``;
* every other command (docker, sbatch, apptainer, pip, ...) must be listed in RUN_BY with the test or make
  target that runs it, and that test must exist. A new command in the docs fails here until it is covered.
"""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Command words other than bench/make/python, and the test (file::function) or make target that runs them.
RUN_BY = {
    "docker run": "tests/test_images.py::test_torch_ddp_in_container",
    "docker compose": "tests/test_images.py::test_compose_two_nodes_over_tcp",
    "docker pull": "tests/test_publish.py::test_publish_pull_back_and_run_names_the_image",
    "sbatch": "tests/test_slurm.py::test_sbatch_scripts_without_container",
    "srun": "tests/test_slurm.py::test_sbatch_scripts_without_container",
    "salloc": "tests/test_slurm.py::test_sweep_inside_an_allocation_runs_one_srun_step_per_cell",
    "torchrun": "tests/test_torch_modes.py::test_torch_ddp_under_torchrun",
    "horovodrun": "tests/test_torch_modes.py::test_torch_horovod_under_horovodrun_gloo",
    "mpirun": "tests/test_torch_modes.py::test_torch_horovod_under_mpirun",
    "pip install": "tests/test_install.py::test_torch_extra_runs_two_ranks",
    "apptainer build": "tests/test_apptainer.py::test_the_definition_file_builds_and_its_test_help_and_labels_work",
    "apptainer exec": "tests/test_apptainer.py::test_exec_self_spawned_ranks_inside_one_container",
    "srun apptainer": "tests/test_apptainer.py::test_sbatch_scripts_with_apptainer",
}
# Commands the docs show that no test here can run, and why. Listed, so that none is silently unchecked.
NOT_RUN_HERE = {
    "apptainer exec --nv": "no GPU here; `apptainer exec` runs in tests/test_apptainer.py",
    "apptainer run --nv": "no GPU here; `apptainer exec` runs in tests/test_apptainer.py",
    "srun -N2": "GPUs per node: none here; `srun -N2 -n2` across two container nodes runs in tests/test_cluster.py",
    "srun --mpi=pmix -N2": "GPUs per node: none here; `srun -N2 --mpi=pmix` runs in tests/test_cluster.py",
    "kubectl": "no Kubernetes control plane here: tests/test_kubernetes.py checks the manifests offline and "
               "tests/test_kubernetes_pods.py starts their pods as the operators would",
}
COMMAND_WORDS = {"bench", "make", "python", "docker", "srun", "sbatch", "salloc", "apptainer", "singularity",
                 "torchrun", "horovodrun", "mpirun", "pip", "kubectl"}
LAUNCHERS = {"srun", "torchrun", "horovodrun", "mpirun", "salloc"}


def doc_commands() -> list[tuple[str, str]]:
    """(file, command) for every line of every code block (indented or fenced), continuations joined."""
    found = []
    for path in DOC_FILES:
        block, fenced = [], False
        for line in path.read_text().splitlines() + [""]:
            if line.startswith("```"):
                fenced = not fenced
                continue
            if fenced or line.startswith("    "):
                block.append(line.strip())
                continue
            text = "\n".join(block).replace("\\\n", " ")
            block = []
            for cmd in text.splitlines():
                cmd = re.split(r"\s+#\s", cmd)[0].strip()
                argv = words(cmd) if cmd else []
                if argv and argv[0] in COMMAND_WORDS:
                    found.append((path.relative_to(ROOT).as_posix(), cmd))
    return found


def words(cmd: str) -> list[str]:
    argv = [w for w in shlex.split(cmd) if w != "..."]
    while argv and re.match(r"^[A-Z_]+=", argv[0]):  # VAR=value prefixes
        argv.pop(0)
    return argv


COMMANDS = doc_commands()


def bench_args(argv: list[str]) -> list[str] | None:
    """The arguments given to bench, wherever it sits in the command line; None if bench is not run."""
    for i, w in enumerate(argv):
        if w == "bench" or (w == "-m" and i + 1 < len(argv) and argv[i + 1] == "bench"):
            return argv[i + 1 + (w == "-m"):]
        if argv[0] == "docker" and argv[1] == "run" and w.startswith("hvdbench") and i > 1:
            return argv[i + 1:]
    return None


def parse_with_cli(args: list[str]) -> None:
    import typer

    from bench.cli import app

    group = typer.main.get_command(app)
    ctx = group.make_context("bench", list(args))
    protected = getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])
    name, sub, rest = group.resolve_command(ctx, [*protected, *ctx.args])
    sub.make_context(name, rest, parent=ctx)


def test_the_docs_show_commands():
    assert len(COMMANDS) > 40
    assert {f for f, _ in COMMANDS} >= {"README.md", "docs/running.md", "docs/sweeps.md"}


@pytest.mark.multiproc
@pytest.mark.parametrize("where, cmd", COMMANDS, ids=[f"{f}:{c[:60]}" for f, c in COMMANDS])
def test_doc_command(where, cmd):
    argv = words(cmd)
    if argv[0] == "make":
        targets = set(re.findall(r"^([a-zA-Z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
        assert argv[1] in targets, f"{where}: make {argv[1]} is not a Makefile target"
        return
    if argv[0] == "python" and argv[1].endswith(".py"):
        r = subprocess.run([sys.executable, argv[1], "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert r.returncode == 0, f"{where}: {argv[1]} --help failed: {r.stderr[-500:]}"
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


@pytest.mark.parametrize("key, runner", RUN_BY.items())
def test_the_runners_exist(key, runner):
    if runner.startswith("make "):
        assert f"\n{runner.split()[1]}:" in (ROOT / "Makefile").read_text()
        return
    file, _, test = runner.partition("::")
    assert (ROOT / file).is_file(), runner
    if test:
        assert re.search(rf"^def {test}\b", (ROOT / file).read_text(), re.M), f"{runner} does not exist"


def test_a_rotten_command_fails_the_check():
    from typer.exceptions import TyperException

    for args in (["torch-ddp", "--no-such-option"], ["sweep", "--cell-timeout", "soon"], ["no-such-command"]):
        with pytest.raises(TyperException):
            parse_with_cli(args)
    docker = "docker run --gpus all hvdbench:current-cpu torch-ddp --np 2"
    assert bench_args(words(docker)) == ["torch-ddp", "--np", "2"]
    assert bench_args(words("OMP_NUM_THREADS=1 srun -n 8 python -m bench torch-ddp")) == ["torch-ddp"]


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_between_the_docs_lands():
    """A relative link names a file that exists and, with #anchor, one of its headings (pages moved into
    docs/measured/ keep their links)."""
    broken = []
    for doc in DOC_FILES:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
            elif anchor and dest.is_file() and anchor not in {
                    _slug(h) for h in re.findall(r"^#+ (.+)$", dest.read_text(), re.M)}:
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken


def test_make_help_lists_every_target_from_its_own_comment():
    """Gate issue, item 5: 11 targets were missing from a help text written by hand. Every target's line carries
    its one comment (`target: deps ## what it does`), which `make help` prints; tier targets are named
    test-<tier>, as test-unit is."""
    text = (ROOT / "Makefile").read_text()
    targets = re.findall(r"^([a-z][\w-]*):(?!=)(.*)$", text, re.M)
    assert len(targets) > 40
    assert [name for name, rest in targets if " ## " not in rest] == []
    assert [name for name, _ in targets if name.endswith("-test")] == []
    phony = set(re.search(r"^\.PHONY:(.*)$", text, re.M).group(1).split())
    assert {name for name, _ in targets if name != "venv"} - phony == set()
