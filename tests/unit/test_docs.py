"""The docs cannot rot: every command shown in README.md and docs/*.md is checked against the code.

* a ``bench`` command (also inside srun, torchrun, docker run, apptainer exec, ...) must parse with the real
  CLI: every subcommand, option and value type exists as written (parsed, not run);
* a ``make`` target must exist in the Makefile; a ``python -m tools.<tool>`` must exist and answer ``--help``;
* every other command (docker, sbatch, apptainer, pip, ...) must be listed in RUN_BY with the test or make
  target that runs it, and that test must exist. A new command in the docs fails here until it is covered;
* in the prose, an inline `bench ...` names commands and options that exist, an inline `make X` a target, and an
  inline tool command only flags its --help lists (tests/multiproc/test_docs.py).
"""

import re
import shlex

import pytest

from tests.conftest import ROOT

DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# Command words other than bench/make/python, and the test (file::function) or make target that runs them.
RUN_BY = {
    "docker run": "tests/system/test_images.py::test_torch_ddp_in_container",
    "docker compose": "tests/system/test_images.py::test_compose_two_nodes_over_tcp",
    "docker pull": "tests/system/test_publish.py::test_publish_pull_back_and_run_names_the_image",
    "sbatch": "tests/system/test_slurm.py::test_sbatch_scripts_without_container",
    "srun": "tests/system/test_slurm.py::test_sbatch_scripts_without_container",
    "salloc -N4 hvdbench-host/bin/bench diagnose --container":
        "tests/system/test_apptainer.py::test_diagnose_where_srun_is_runs_every_step_in_the_sif",
    "salloc": "tests/system/test_slurm.py::test_sweep_inside_an_allocation_runs_one_srun_step_per_cell",
    "torchrun": "tests/multiproc/test_torch_modes.py::test_torch_ddp_under_torchrun",
    "horovodrun": "tests/multiproc/test_torch_modes.py::test_torch_horovod_under_horovodrun_gloo",
    "mpirun": "tests/multiproc/test_torch_modes.py::test_torch_horovod_under_mpirun",
    "pip install": "tests/multiproc/test_install.py::test_torch_extra_runs_two_ranks",
    "apptainer build":
        "tests/system/test_apptainer.py::test_the_definition_file_builds_and_its_test_help_and_labels_work",
    "apptainer exec": "tests/system/test_apptainer.py::test_exec_self_spawned_ranks_inside_one_container",
    "srun apptainer": "tests/system/test_apptainer.py::test_sbatch_scripts_with_apptainer",
}
COMMAND_WORDS = {"bench", "make", "python", "docker", "srun", "sbatch", "salloc", "apptainer", "singularity",
                 "torchrun", "horovodrun", "mpirun", "pip", "kubectl"}


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


def prose(text: str) -> str:
    """A doc's text outside its code blocks (indented or fenced)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and not line.startswith("    "):
            out.append(line)
    return "\n".join(out)


def inline_commands() -> list[tuple[str, str]]:
    """(file, span) for every inline code span in the docs' prose that is a command of ``bench``, ``make`` or one
    of this project's tools (``python -m tools.X``, ``tools/X.py``), placeholders filled: MODE as a mode, and the
    ``[...]`` of an optional part kept without its brackets; ``python -m tools.NAME`` (any tool) is not a command."""
    found = []
    for path in DOC_FILES:
        if "measured" in path.parts:  # a measurement page keeps the command line it ran with
            continue
        for span in re.findall(r"`([^`\n]+)`", prose(path.read_text())):
            for part in span.replace("[", "").replace("]", "").replace("MODE", "torch-ddp").split(" && "):
                if re.match(r"(bench|make|python -m tools\.[\w.]+|tools/[\w/]+\.py)( |$)", part) and \
                        "tools.NAME" not in part:
                    found.append((path.relative_to(ROOT).as_posix(), part))
    return found


INLINE = inline_commands()


def bench_args(argv: list[str]) -> list[str] | None:
    """The arguments given to bench, wherever it sits in the command line; None if bench is not run."""
    for i, w in enumerate(argv):
        if w == "bench" or w.endswith("/bin/bench") or (w == "-m" and i + 1 < len(argv) and argv[i + 1] == "bench"):
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
    assert bench_args(words("salloc -N4 venv/bin/bench diagnose --hosts a,b")) == ["diagnose", "--hosts", "a,b"]


@pytest.mark.parametrize("where, span", [(w, s) for w, s in INLINE if s.startswith(("bench", "make"))],
                         ids=[f"{w}:{s[:50]}" for w, s in INLINE if s.startswith(("bench", "make"))])
def test_inline_bench_and_make_commands_exist(where, span):
    """Issue 69: the prose's own commands, not only the code blocks'. A ``bench`` span names a command and options
    that exist (a mention may leave out the values and arguments the command needs); a ``make`` span, a target."""
    argv = words(span)
    if argv[0] == "make":
        targets = set(re.findall(r"^([a-zA-Z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
        assert all(t in targets for t in argv[1:] if "=" not in t and not t.startswith("-")), f"{where}: {span}"
        return
    assert rotten(argv[1:]) is None, f"{where}: `{span}`: {rotten(argv[1:])}"


def rotten(args: list[str]) -> str | None:
    """Why a mention of ``bench ARGS`` names what does not exist (an option, a command), or None. Typer's parser
    errors are told apart by their class names (typer vendors click's as private classes)."""
    try:
        parse_with_cli(args)
    except Exception as exc:  # noqa: BLE001 - --help's exit, or a value or argument the mention leaves out
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        if type(exc).__name__ == "NoSuchOption" or "No such command" in message:
            return message
    return None


def test_the_inline_check_catches_a_rotten_mention():
    assert ("docs/running.md", "bench models --json") in INLINE
    assert "--sbatch" in rotten(["torch-ddp", "--sbatch"]) and "No such command" in rotten(["nope"])
    assert rotten(["report"]) is None and rotten(["torch-ddp", "--help"]) is None  # a mention, not a run


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


def word_count(path) -> int:
    return len(path.read_text().split())


def test_the_docs_are_read_in_minutes():
    """README under 1,000 words; README and the first multi-node run's page together at most 2,500; every other page
    at most 2,500 (about ten minutes), a longer one split along its headings into pages of their own. The pages of
    measurements (docs/measured/) are records, kept as they were written."""
    readme, first = word_count(ROOT / "README.md"), word_count(ROOT / "docs" / "first-run.md")
    assert readme < 1000 and readme + first <= 2500, (readme, first)
    long = {p.name: n for p in sorted((ROOT / "docs").glob("*.md")) if (n := word_count(p)) > 2500}
    assert long == {}
