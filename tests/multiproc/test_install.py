"""What pyproject.toml declares is enough: `pip install '.[torch]'` into a clean venv runs a 2-rank torch-ddp,
a missing optional dependency is one line that names the extra that brings it, and bench alone (no extra) runs
bench diagnose's own process, whose steps start in a container (docs/diagnose.md, "With a SIF")."""

import json
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, SMALL, bench_env


@pytest.fixture(scope="module")
def torch_venv(tmp_path_factory):
    venv = tmp_path_factory.mktemp("clean") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # torch 2.13.0 is this machine's local CPU wheel; any other version would pull GBs of CUDA packages.
    constraints = venv.parent / "constraints.txt"
    constraints.write_text("torch==2.13.0\n")
    start = time.monotonic()
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"{ROOT}[torch]", "-c", str(constraints)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    print(f"clean-venv install of .[torch]: {time.monotonic() - start:.0f} s")
    return venv


def test_torch_extra_runs_two_ranks(torch_venv, tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([str(torch_venv / "bin" / "bench"), "torch-ddp", *SMALL, "--np", "2", "--output", str(out)],
                       capture_output=True, text=True, timeout=300, env=bench_env(), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(list(out.glob("*.json"))) == 1
    pip = subprocess.run([str(torch_venv / "bin" / "pip"), "list"], capture_output=True, text=True).stdout
    assert "tensorflow" not in pip and "horovod" not in pip.lower()


@pytest.mark.parametrize("args, message", [
    (["tf-native"], "TensorFlow modes need tensorflow (No module named 'tensorflow'); pip install '.[tf]'"),
    (["torch-horovod"], "needs Horovod built with PyTorch support"),
    (["report", str(ROOT / "tests" / "fixtures" / "sweep-a")], "matplotlib is not installed; pip install '.[report]'"),
])
def test_a_missing_extra_is_one_clear_line(torch_venv, tmp_path, args, message):
    r = subprocess.run([str(torch_venv / "bin" / "bench"), *args, *(["--output", str(tmp_path)] if
                       args[0] != "report" else ["--output", str(tmp_path)])],
                       capture_output=True, text=True, timeout=120, env=bench_env(), cwd=tmp_path)
    assert r.returncode == 1 and message in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory):
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(ROOT)], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return venv


def test_bench_alone_runs_diagnose_with_its_steps_in_a_container(bare_venv, tmp_path):
    """A SIF's users install bench alone where srun is: diagnose runs there, every step starting the container
    (hosts that do not resolve: each step fails, a finding, exit 3, and the record says what each step ran)."""
    pip = subprocess.run([str(bare_venv / "bin" / "pip"), "list"], capture_output=True, text=True).stdout.lower()
    assert not any(name in pip for name in ("torch", "tensorflow", "horovod", "matplotlib"))
    r = subprocess.run([str(bare_venv / "bin" / "bench"), "diagnose", "--hosts", "nohost1.invalid,nohost2.invalid",
                        "--phases", "devices", "--container", "apptainer exec --nv /shared/h.sif", "--output",
                        str(tmp_path)], capture_output=True, text=True, timeout=300, env=bench_env(), cwd=tmp_path)
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    (path,) = tmp_path.glob("diagnose-*/diagnose.json")
    steps = json.loads(path.read_text())["phases"]["devices"]["steps"]
    assert len(steps) == 2 and all(s["exit_code"] != 0 for s in steps)
    assert all("apptainer exec --nv /shared/h.sif python3 -c" in s["command"][-1] for s in steps)



def test_the_manifest_check_runs_from_a_plain_python3_with_the_validators_it_names(tmp_path_factory):
    """tools/k8s_check.py needs no bench and no dev venv: a venv of a plain python3 with the three validators it
    names (its one line where one is missing) checks the shipped manifests from the checkout."""
    import shlex

    from tools import k8s_check

    venv = tmp_path_factory.mktemp("validators") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    packages = shlex.split(k8s_check.NEEDS.split("pip install", 1)[1])
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *packages], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    subprocess.run([sys.executable, "-m", "venv", str(venv.parent / "bare")], check=True)  # none of them
    bare = subprocess.run([str(venv.parent / "bare" / "bin" / "python"), "-m", "tools.k8s_check", "-"], cwd=ROOT,
                          input="", capture_output=True, text=True, timeout=120)
    assert bare.returncode == 2 and k8s_check.NEEDS in bare.stderr and len(bare.stderr.strip().splitlines()) == 1
    examples = sorted(str(p) for p in (ROOT / "k8s" / "examples").glob("*.yaml"))
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "tools.k8s_check", *examples], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert examples and done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
