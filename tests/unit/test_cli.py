"""The CLI contract: help without heavy imports, and bad input -> one line, non-zero exit, no result."""

import json
import os

import pytest
from typer.testing import CliRunner

from bench import __version__
from bench.cli import app
from tests.conftest import one_line_error

runner = CliRunner()


def test_help_lists_modes_and_version():
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    for word in ("torch-ddp", "torch-horovod", "models", "env"):
        assert word in r.output
    assert runner.invoke(app, ["--version"]).output.strip() == f"hvdbench {__version__}"
    r = runner.invoke(app, ["torch-ddp", "--help"])
    for option in ("--model", "--batch-size", "--image-size", "--precision", "--channels-last", "--warmup-steps",
                   "--steps-per-window", "--windows", "--duration", "--np", "--device", "--seed", "--output",
                   "--fp16-allreduce", "--num-classes"):
        assert option in r.output, option


def test_each_run_option_is_declared_once_and_every_command_takes_it_from_there(cli, monkeypatch):
    """The mode commands take every option RunConfig declares, the sweep those declared for sweeps, each with
    its declared help and checks; what the command line gives reaches RunConfig as it is."""
    import typer.main

    from bench.config import RunConfig, cli_options

    declared = cli_options()
    commands = typer.main.get_command(app).commands
    mode_flags = {p.name: p for p in commands["torch-ddp"].params}
    assert set(mode_flags) == set(declared)
    assert all(mode_flags[name].help == how.help for name, how in declared.items())
    sweep_flags = {p.name for p in commands["sweep"].params}
    assert {name for name, how in declared.items() if how.sweep} <= sweep_flags
    assert not {name for name, how in declared.items() if not how.sweep} & (sweep_flags - {"np", "output"})
    import bench.run

    got = []
    monkeypatch.setattr(bench.run, "run", got.append)  # this one is let through, to see what it carries
    r = cli("torch-ddp", "--batch-size", "3", "--no-telemetry", "--stall-timeout", "9", "--output", "x")
    assert r.returncode == 0, r.stderr
    (cfg,) = got
    assert isinstance(cfg, RunConfig) and (cfg.batch_size, cfg.telemetry, cfg.stall_timeout) == (3, False, 9.0)
    r = cli("torch-ddp", "--stall-timeout", "0", "--output", "x")  # a declared check, its one line
    assert r.returncode == 1 and r.stderr.strip() == "error: --stall-timeout must be > 0 seconds (got 0.0)"


def test_models_lists_counts():
    r = runner.invoke(app, ["models"])
    assert r.exit_code == 0 and "138,357,544" in r.output and "25,557,032" in r.output


@pytest.mark.parametrize("columns", ["40", "60", "200"])
def test_models_never_cuts_a_name_users_type(monkeypatch, columns):
    """In a pipe or a narrow terminal every model name stays whole on one line (the description wraps)."""
    from bench.models import MODELS

    monkeypatch.setenv("COLUMNS", columns)
    r = runner.invoke(app, ["models"])
    assert r.exit_code == 0
    names = {line.split("│")[1].strip() for line in r.output.splitlines() if line.count("│") > 2}
    assert set(MODELS) <= names, (set(MODELS) - names, r.output)


def test_models_json_for_scripts():
    from bench.models import MODELS

    r = runner.invoke(app, ["models", "--json"])
    rows = json.loads(r.output)
    assert [row["model"] for row in rows] == list(MODELS)
    vgg = next(row for row in rows if row["model"] == "vgg16")
    assert vgg["parameters"] == 138_357_544 and vgg["unit"] == "image" and vgg["kind"] == "image"
    text = next(row for row in rows if row["model"] == "transformer-small")
    assert text["unit"] == "sequence" and text["default_seq_len"] == 32 and text["sparse_embeddings"]


@pytest.mark.parametrize("args, message", [
    (["tf-nope"], "No such command"),
    (["torch-ddp", "--model", "alexnet"], "alexnet"),
    (["torch-ddp", "--batch-size", "0"], "--batch-size must be an integer >= 1"),
    (["torch-ddp", "--windows", "0"], "--windows"),
    (["torch-ddp", "--steps-per-window", "0"], "--steps-per-window"),
    (["torch-ddp", "--np", "0"], "--np"),
    (["torch-ddp", "--precision", "fp64"], "fp64"),
])
def test_bad_input_one_line(cli, args, message, out):
    r = cli(*args, "--output", str(out)) if args[0] == "torch-ddp" else cli(*args)
    assert message in one_line_error(r)
    assert not out.exists()


def test_summary_line_of_framework_errors():
    from bench.errors import summary_line

    assert summary_line(TypeError("in user code:\n\n  File x\n    y\n\n  TypeError: bad dtype")) == \
        "TypeError: bad dtype"
    assert summary_line(RuntimeError("Connection reset by peer\nmore")) == "Connection reset by peer"
    assert summary_line(ValueError("")) == ""


def test_settings_record_what_decides_throughput():
    from bench.records.env import settings

    env = {"NCCL_IB_DISABLE": "1", "HOROVOD_FUSION_THRESHOLD": "67108864", "OMPI_MCA_btl": "^openib",
           "UCX_TLS": "tcp", "OMP_NUM_THREADS": "4", "CUDA_VISIBLE_DEVICES": "0,1", "TF_CPP_MIN_LOG_LEVEL": "2",
           "HOROVOD_RANK": "1", "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1", "HOME": "/root", "RANK": "1"}
    assert settings(env) == {k: env[k] for k in ("CUDA_VISIBLE_DEVICES", "HOROVOD_FUSION_THRESHOLD", "NCCL_IB_DISABLE",
                                                  "OMPI_MCA_btl", "OMP_NUM_THREADS", "TF_CPP_MIN_LOG_LEVEL", "UCX_TLS")}


def test_a_framework_out_of_memory_error_is_one_line_with_what_to_try(cli, monkeypatch):
    """CUDA out of memory on a rank (torch.cuda.OutOfMemoryError, faked: no GPU here), or TensorFlow's
    ResourceExhaustedError: one line that says what ran out and what to try, not an internal error."""
    import bench.run

    class OutOfMemoryError(RuntimeError):  # torch.cuda.OutOfMemoryError's name and base
        pass

    class ResourceExhaustedError(Exception):  # tf.errors.ResourceExhaustedError's name
        pass

    for error, words in ((OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                                           "capacity of 79.19 GiB"), "out of GPU memory (CUDA out of memory."),
                         (ResourceExhaustedError("OOM when allocating tensor with shape[64,64,112,112]"),
                          "out of memory (OOM when allocating tensor")):
        def raise_it(cfg, error=error):
            raise error

        monkeypatch.setattr(bench.run, "run", raise_it)
        r = cli("torch-ddp", "--output", "/nonexistent/never-written")
        line = one_line_error(r, code=1)
        assert line.startswith(f"error: {words}") and "try a smaller --batch-size" in line, line
        assert "internal error" not in line


def test_verbose_lets_the_frameworks_start_up_logging_through_for_the_command_and_its_ranks(cli, monkeypatch):
    """`bench -v ...` sets HVDBENCH_VERBOSE=1 in the environment the command's ranks and children inherit
    (bench.tfutil.quiet_startup drops TensorFlow's start-up chatter unless it is set); without -v nothing is set."""
    from bench.tfutil import VERBOSE_ENV

    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    assert cli("models").returncode == 0 and VERBOSE_ENV not in os.environ
    assert cli("-v", "models").returncode == 0 and os.environ[VERBOSE_ENV] == "1"
    monkeypatch.delenv(VERBOSE_ENV)
    assert cli("--verbose", "models").returncode == 0 and os.environ[VERBOSE_ENV] == "1"
    assert "--verbose" in cli("--help").stdout and "-v" in cli("--help").stdout


def test_a_childs_failure_reaches_the_user_as_its_own_line(cli, monkeypatch):
    """bench.errors.one_line: the same line for a domain error whether the command or its child raised it."""
    from bench.errors import BenchError, Reported, one_line

    line, code = one_line(BenchError("tf: the training split gave fewer than 21 batches"))
    assert (line, code) == ("error: tf: the training split gave fewer than 21 batches", 1)
    assert one_line(Reported(line, code)) == (line, code)
    assert one_line(ValueError("bad\nmore"))[0].startswith("internal error: ValueError: bad (HVDBENCH_DEBUG=1")


def test_the_names_users_bring_from_horovods_scripts(cli, monkeypatch):
    """Horovod's synthetic benchmark's --num-warmup-batches, --num-batches-per-iter and --num-iters, horovodrun's
    and mpirun's -np, torchtitan's bare --compile: each means bench's own option."""
    import bench.run

    got = []
    monkeypatch.setattr(bench.run, "run", got.append)
    r = cli("torch-ddp", "--num-warmup-batches", "3", "--num-batches-per-iter", "4", "--num-iters", "5", "-np", "2",
            "--compile", "--output", "x")
    assert r.returncode == 0, r.stderr
    r = cli("torch-ddp", "--windows", "6", "--compile")  # last on the line
    assert r.returncode == 0, r.stderr
    r = cli("torch-ddp", "--compile", "max-autotune")
    assert r.returncode == 0, r.stderr
    first, last, named = got
    assert (first.warmup_steps, first.steps_per_window, first.windows, first.np) == (3, 4, 5, 2)
    assert (first.compile, last.compile, last.windows, named.compile) == ("default", "default", 6, "max-autotune")
    from bench.cli import ALIASES, spelled

    for command in ("sweep", "tune", "verify", "allreduce", "peak", "converge", "data bench", "k8s"):
        assert ALIASES[command]["-np"] == "--np", command
    assert spelled(["data", "bench", "x", "-np", "2"]) == ["data", "bench", "x", "--np", "2"]
    assert spelled(["sweep", "--num-iters", "3"]) == ["sweep", "--windows", "3"]  # a run option sweeps pass on
    # the help lists each option under its own name; the run options' help texts name Horovod's
    monkeypatch.setenv("COLUMNS", "250")
    text = " ".join(runner.invoke(app, ["torch-ddp", "--help"]).output.split())
    assert "--num-iters" in text and "--num-warmup-batches" in text and "--num-iters," not in text


def test_spelled_puts_the_spellings_in_the_parsers_form():
    from bench.cli import spelled

    assert spelled(["torch-ddp", "--compile"]) == ["torch-ddp", "--compile", "default"]
    assert spelled(["torch-ddp", "--compile", "--np", "2"]) == ["torch-ddp", "--compile", "default", "--np", "2"]
    assert spelled(["torch-ddp", "--compile", "none"]) == ["torch-ddp", "--compile", "none"]
    assert spelled(["report", "a", "--out", "b"]) == ["report", "a", "--output", "b"]
    assert spelled(["-v", "report", "a", "--out=b"]) == ["-v", "report", "a", "--output=b"]
    assert spelled(["sweep", "--out", "b"]) == ["sweep", "--out", "b"]  # renamed for report only
    assert spelled(["run", "--", "--compile"]) == ["run", "--", "--compile"]


def test_report_takes_output_as_every_command_does_and_out_still_works(cli, tmp_path):
    """--output names report's folder as it does every other command's; the old --out still works, unlisted."""
    from tests.conftest import FIXTURES

    for flag in ("--output", "--out"):
        target = tmp_path / flag.strip("-")
        r = cli("report", str(FIXTURES / "sweep-a"), flag, str(target))
        assert r.returncode == 0, r.stderr
        assert (target / "report.md").is_file()
    help_text = runner.invoke(app, ["report", "--help"]).output
    assert "--output" in help_text and "--out " not in help_text


def test_every_docs_page_a_help_text_names_exists():
    """Each docs/...md a command's or an option's help names is a page of docs/."""
    import re

    import typer.main

    from tests.conftest import ROOT

    root = typer.main.get_command(app)
    texts = []

    def walk(command):
        texts.append(command.help or "")
        texts.extend(getattr(p, "help", None) or "" for p in command.params)
        for sub in getattr(command, "commands", {}).values():
            walk(sub)
    walk(root)
    named = {m for text in texts for m in re.findall(r"docs/[\w/.-]+?\.md", text)}
    assert named, "no help text names a page"
    assert not [page for page in named if not (ROOT / page).is_file()], named
