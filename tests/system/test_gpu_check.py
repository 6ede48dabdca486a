"""The GPU check (tools/gpu-check.sh, docs/gpu-check.md) in its short mode on this CPU machine, so that it runs
end to end the day a GPU is lent; and the wheels `make gpu-check-prepare` puts aside for the GPU machine.

The gpu_check tier (make test-gpu-check) needs no service, only the venv. It is a system tier for its key
(tools/tier_cache.py): it reruns when the check's own scripts, bench's command line (bench/cli.py,
bench/config.py: the options the check passes) or code that no lower tier runs change, not on every change to
code the lower tiers run, which its runs go through as theirs do.
"""

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, bench_env

pytestmark = pytest.mark.gpu_check


# About 5 minutes idle, twice that beside make test's image builds: bounded by its three calls' (1500 s in all).
@pytest.mark.timeout(1800)
def test_the_short_check_runs_end_to_end_and_resumes(tmp_path):
    """A first call that names its steps (HVDBENCH_GPU_CHECK_ONLY, as a short lease does) runs those and install,
    and leaves the others undone; a second with no time budget stops before a step (exit 3, as a call near the
    device's 10-minute limit does); the third with the same state goes on from there, runs every step once, and
    leaves at most 8 files (what the device tool brings back)."""
    out, state = tmp_path / "out", tmp_path / "state"
    check = [str(ROOT / "tools" / "gpu-check.sh"), "--short", str(out)]
    env = bench_env(PYTHON=sys.executable, HVDBENCH_GPU_CHECK_STATE=str(state), HVDBENCH_GPU_CHECK_ONLY="e*v")
    named = subprocess.run(check, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert named.returncode == 0, named.stdout[-3000:] + named.stderr[-3000:]
    assert [line.split("\t")[:2] for line in (out / "status.tsv").read_text().splitlines()] == [
        ["install", "0"], ["env", "0"]]
    assert sorted(p.name for p in (state / "done").iterdir()) == ["env", "install"]
    del env["HVDBENCH_GPU_CHECK_ONLY"]
    env["HVDBENCH_GPU_CHECK_BUDGET"] = "0"
    stopped = subprocess.run(check, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert stopped.returncode == 3 and "run the same command again" in stopped.stdout, stopped.stdout + stopped.stderr
    env["HVDBENCH_GPU_CHECK_BUDGET"] = "900"
    rest = subprocess.run(check, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert rest.returncode == 0, rest.stdout[-3000:] + rest.stderr[-3000:]
    steps = [line.split("\t") for line in (out / "status.tsv").read_text().splitlines()]
    names = [s[0] for s in steps]
    assert len(names) == len(set(names)) and names[:4] == ["install", "env", "preflight", "peak-fp32"]  # in order
    assert {"torch-ddp-vgg16-fp32", "tuned-vgg16-fp32", "torch-horovod-vgg16-fp32", "reference", "torch-ddp-data",
            "torch-ddp-data-slow-loader", "data-bench", "transformer", "verify", "torch-ddp-converge",
            "torch-ddp-resume", "soak"} <= set(names)
    assert all(s[1] == "0" for s in steps), steps
    files = sorted(p.name for p in out.iterdir())
    assert files == ["env.txt", "logs.tar.gz", "results.tar.gz", "status.tsv", "summary.md"] and len(files) <= 8
    summary = (out / "summary.md").read_text()
    assert "| torch-ddp | vgg16 | fp32 | cpu-quick, batch 2 | 2 |" in summary and "## bench verify: PASS" in summary
    # paper and tuned side by side (the paper's run first in the window, under the loop's own name)
    assert names.index("torch-single-vgg16-fp32") < names.index("tuned-vgg16-fp32") < names.index(
        "torch-ddp-vgg16-fp32")
    assert ("| torch-single | vgg16 | fp32 | cpu-tuned, batch 2, channels-last, compiled (default), fused optimizer "
            "| 1 |") in summary
    assert "## torch-horovod against Horovod's own PyTorch benchmark" in summary
    assert "| peak-fp32 | ok |" in summary and "| preflight | ok |" in summary
    assert "## Sustained load (bench soak)" in summary and "| cpu (" in summary.split("## Sustained load", 1)[1]
    assert "## Input pipeline (--data against synthetic)" in summary
    assert "| torch-ddp | vgg16 | fp32 | 2 | torch" in summary
    # and the slow loader's run beside it (one worker); on the CPU no device idle (the column's "-")
    fed = summary.split("## Input pipeline (--data against synthetic)", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in fed.splitlines() if line.startswith("| torch-ddp | vgg16 | fp32 | 2 | torch, ")]
    assert len(rows) == 2 and "| torch, 1 |" in rows[1] and "max device idle share" in fed, fed
    # each loader alone on the same files; DALI (in this venv) on the CPU here, so its GPU path is named unmeasured
    assert "## Input pipeline alone (bench data bench)" in summary and "| torch | cpu | 1 |" in summary
    assert "| dali | cpu | 1 |" in summary and "DALI decoding on the GPU: not measured" in summary
    # DALI with channels-last against the torch loader, to the same epoch: both losses, and their ratio
    assert {"loss-dali-channels-last", "loss-torch-channels-last"} <= set(names)
    losses = summary.split("## DALI with channels-last against the torch loader (losses)", 1)[1].split("\n## ", 1)[0]
    assert [line.split(" | ")[0] for line in losses.splitlines() if line.startswith("| dali") or
            line.startswith("| torch")] == ["| dali", "| torch"], losses
    assert "Training loss, DALI / torch loader: " in losses, losses
    # the run to a target, and the same resumed from its checkpoint after epoch 1 (the column "resumed after epoch")
    training = summary.split("## Training to a target", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in training.splitlines() if line.startswith("| torch-ddp | resnet20 | 2 | 2 | 0.95 |")]
    assert sorted(row.rsplit("|", 2)[1].strip() for row in rows) == ["-", "1"], training


def test_the_prepared_wheels_install_without_an_index(tmp_path):
    """`make gpu-check-prepare`'s wheels, for the GPU machine's Python 3.12, install with --no-index into a fresh
    target (as the check installs them there), and with Horovod's sdist stay far below what a call carries. cffi
    is among them: Horovod's setup.py requires it to build its PyTorch extension and, on the GPU machine, which
    has none, tried the index and failed."""
    prepared = tmp_path / "prepared"
    r = subprocess.run([str(ROOT / "tools" / "gpu-check-prepare.sh"), str(prepared), sys.executable],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    wheels = sorted(p.name for p in (prepared / "wheels").glob("*.whl"))
    assert any(w.startswith("pydantic-") for w in wheels) and any("cp312" in w for w in wheels), wheels
    target = tmp_path / "fresh"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_17_x86_64",
                        "--target", str(target), *map(str, (prepared / "wheels").glob("*.whl"))],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, PIP_NO_INDEX="1"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert (target / "pydantic").is_dir() and (target / "pydantic_core").is_dir()
    assert (target / "cffi").is_dir() and (target / "pycparser").is_dir()
    assert sum(p.stat().st_size for p in prepared.rglob("*") if p.is_file()) < 32 * 2**20
    # The carried sdist takes every patch a GPU build there applies (the GCC 13 one: the machine's g++ is 13.3).
    sdist = next(prepared.glob("horovod-*.tar.gz"))
    subprocess.run(["tar", "xzf", str(sdist), "-C", str(tmp_path)], check=True)
    source = next(tmp_path.glob("horovod-*/"))
    for patch in ("0.28.1.patch", "0.28.1-gpu.patch", "0.28.1-gcc13.patch"):
        r = subprocess.run(["patch", "-p1", "--forward", "--quiet", "-i", str(ROOT / "docker" / "horovod" / patch)],
                           cwd=source, capture_output=True, text=True)
        assert r.returncode == 0, (patch, r.stdout, r.stderr)
