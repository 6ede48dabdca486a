"""Frameworks in separate Python environments (the CUDA image): re-execution, bench env, the no-GPU message."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.launching import envs
from tests.unit.test_envs import other_env as other_env  # noqa: F401 (the fixture, shared)

BENCH = [sys.executable, "-m", "bench"]


def split_env(other: Path) -> dict[str, str]:
    return dict(os.environ, HVDBENCH_PYTHON_TF=str(other / "bin" / "python"), HVDBENCH_PYTHON_TORCH=sys.executable)


def test_interpreter_that_does_not_run_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HVDBENCH_PYTHON_TF", str(tmp_path / "bin" / "python"))
    r = subprocess.run([*BENCH, "tf-horovod", "--np", "2"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "HVDBENCH_PYTHON_TF=" in r.stderr and "not an executable Python interpreter" in r.stderr


def test_env_probes_each_framework_in_its_own_environment(other_env):
    r = subprocess.run([*BENCH, "env", "--json", "--check"], capture_output=True, text=True, timeout=300,
                       env=split_env(other_env))
    assert r.returncode == 0, r.stderr[-2000:]
    record = json.loads(r.stdout)
    parts = record["environments"]
    assert parts["tensorflow"]["prefix"] == os.path.realpath(other_env)
    assert parts["torch"]["prefix"] == os.path.realpath(sys.prefix)
    assert parts["tensorflow"]["python"] == str(other_env / "bin" / "python")
    assert record["tensorflow"]["version"] and record["torch"]["version"]
    assert parts["tensorflow"]["horovod"]["gloo_built"]  # Horovod's TensorFlow module, from that environment
    assert "each framework's process loads at most one NCCL" in r.stderr
    listed = {line.split()[1] for line in r.stderr.splitlines()
              if line.startswith("libraries: ") and len(line.split()) == 4}
    assert listed == {"torch", "tensorflow"}, r.stderr[-2000:]  # one "libraries: ENV LIB PATH" line per file


def test_a_mode_runs_in_its_frameworks_environment(other_env, tmp_path):
    """bench tf-single started from this environment re-executes in the TensorFlow one (os.execv): the result
    records the environment that ran it."""
    out = tmp_path / "out"
    r = subprocess.run([*BENCH, "tf-single", "--model", "resnet50", "--image-size", "32", "--batch-size", "2",
                        "--warmup-steps", "1", "--steps-per-window", "1", "--windows", "1", "--output", str(out)],
                       capture_output=True, text=True, timeout=300, env=split_env(other_env))
    assert r.returncode == 0, r.stderr[-2000:]
    (result,) = out.glob("*-tf-single-*.json")
    assert json.loads(result.read_text())["environment"]["environment"] == str(other_env)


def test_run_config_given_inline_is_the_same_as_a_file(tmp_path):
    cfg = {"mode": "torch-single", "model": "nope"}
    r = subprocess.run([*BENCH, "run", json.dumps(cfg)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "nope" in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr


def test_verify_across_frameworks_needs_one_environment(other_env):
    r = subprocess.run([*BENCH, "verify", "--framework", "both"], capture_output=True, text=True, timeout=120,
                       env=split_env(other_env))
    assert r.returncode == 1 and "--framework torch and --framework tf" in r.stderr, r.stderr


FAKE_NVML = """
class NVMLError(Exception):
    pass
def nvmlInit():
    pass
def nvmlDeviceGetCount():
    return 2
def nvmlShutdown():
    pass
"""


@pytest.mark.parametrize("mode, words", [("tf-single", ("TensorFlow sees none", "tensorflow-cpu", "make image")),
                                         ("torch-single", ("PyTorch sees none", "CPU wheel", envs.MIN_DRIVER))])
def test_a_gpu_machine_whose_framework_sees_no_gpu_is_refused(tmp_path, mode, words):
    """Issue 69: make venv's tensorflow-cpu (or a CPU torch wheel) on a machine with NVIDIA GPUs measured the CPU
    silently under --device auto. NVML here is a stand-in that counts 2 GPUs."""
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "pynvml.py").write_text(FAKE_NVML)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "fake"), env.get("PYTHONPATH", "")])
    r = subprocess.run([*BENCH, mode, "--output", str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0, r.stderr
    for w in ("2 NVIDIA GPU(s)", "--device cpu", *words):
        assert w in r.stderr, w
    assert not out.exists() or not any(out.iterdir())


def test_cuda_image_without_a_gpu_says_how_to_run(tmp_path):
    """In the CUDA image --device auto without a GPU is an error that says how to give the container its GPUs
    and how to run on the CPU instead; nothing is written."""
    out = tmp_path / "out"
    r = subprocess.run([*BENCH, "torch-single", "--output", str(out)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, HVDBENCH_IMAGE_FLAVOR="cuda"))
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0, r.stderr
    for words in ("no GPU is visible to PyTorch", "--gpus all", "--nv", envs.MIN_DRIVER, "--device cpu"):
        assert words in r.stderr, words
    assert not out.exists() or not any(out.iterdir())
