"""The CLI contract: help without heavy imports, and bad input -> one line, non-zero exit, no result."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from bench.cli import app
from tests.conftest import SMALL, bench, one_line_error

runner = CliRunner()


def test_help_does_not_import_frameworks():
    code = ("import sys; from bench.cli import main; sys.argv=['bench','--help']\n"
            "try:\n main()\nexcept SystemExit: pass\n"
            "print('HEAVY', [m for m in ('torch','tensorflow','horovod','pynvml') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert "HEAVY []" in out


def test_env_json():
    r = runner.invoke(app, ["env", "--json"])
    assert r.exit_code == 0
    record = json.loads(r.output)
    assert record["torch"]["version"].startswith("2.")
    assert record["tensorflow"]["keras"].startswith("tf-keras 2.")
    assert record["horovod"]["gloo_built"] is True and record["horovod"]["mpi_built"] is True
    assert record["shm_gib"] > 0 and record["numa_nodes"] >= 1 and record["cpu_count"] >= 1
    assert any("libmpi" in path for path in record["loaded_libraries"]["mpi"])  # Horovod loaded Open MPI
    if not record["nvml"]["available"]:
        assert record["nvml"]["reason"]  # absence has a reason


@pytest.mark.parametrize("args, message", [
    (["--device", "cuda"], "no CUDA GPU"),
    (["--precision", "amp-fp16", "--device", "cpu"], "amp-fp16 needs a GPU"),
])
def test_bad_input_one_line_from_a_real_process(args, message, out):
    """The one-line error path end to end, in a process of its own (the checks a run makes before it starts)."""
    r = bench("torch-ddp", *args, "--output", str(out))
    assert message in one_line_error(r)
    assert not list(out.glob("*.json")) if out.exists() else True


def test_unwritable_output(tmp_path):
    (tmp_path / "file").write_text("x")
    r = bench("torch-ddp", "--output", str(tmp_path / "file" / "out"))
    assert "not writable" in one_line_error(r, code=1)


def test_horovod_mode_without_horovod(out):
    code = ("import sys; sys.modules['horovod'] = None; sys.modules['horovod.torch'] = None\n"
            "from bench.cli import main; main()")
    r = subprocess.run([sys.executable, "-c", code, "torch-horovod", "--output", str(out)], capture_output=True,
                       text=True)
    assert "needs Horovod built with PyTorch" in one_line_error(r, code=1)


def test_malformed_launcher_environment(out):
    r = bench("torch-ddp", *SMALL, "--output", str(out), OMPI_COMM_WORLD_RANK="one", OMPI_COMM_WORLD_SIZE="2")
    assert "malformed launcher environment" in one_line_error(r, code=1)
    r = bench("torch-ddp", *SMALL, "--output", str(out), RANK="0", WORLD_SIZE="2", LOCAL_RANK="0",
              TORCHELASTIC_RUN_ID="x")
    assert "MASTER_ADDR" in one_line_error(r, code=1)
    assert not out.exists() or not list(out.glob("*.json"))


def test_np_mismatch_under_launcher(out):
    r = bench("torch-ddp", *SMALL, "--np", "4", "--output", str(out), OMPI_COMM_WORLD_RANK="0",
              OMPI_COMM_WORLD_SIZE="1", OMPI_COMM_WORLD_LOCAL_RANK="0", OMPI_COMM_WORLD_LOCAL_SIZE="1")
    assert "does not match" in one_line_error(r, code=1)
