"""Frameworks in separate Python environments (the CUDA image): re-execution, bench env, the no-GPU message."""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from bench.launching import envs
from bench.records.env import library_lines, library_problems

ROOT = Path(__file__).resolve().parents[1]
BENCH = [sys.executable, "-m", "bench"]


@pytest.fixture(scope="module")
def other_env(tmp_path_factory):
    """A second, real venv that sees this one's packages and this checkout (a .pth file), the way the CUDA
    image's TensorFlow environment is a venv of its own."""
    root = tmp_path_factory.mktemp("tfenv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "hvdbench-test.pth").write_text(f"{ROOT}\n{sysconfig.get_paths()['purelib']}\n")
    return root


def split_env(other: Path) -> dict[str, str]:
    return dict(os.environ, HVDBENCH_PYTHON_TF=str(other / "bin" / "python"), HVDBENCH_PYTHON_TORCH=sys.executable)


def test_interpreter_is_none_for_this_environment(monkeypatch, other_env):
    monkeypatch.delenv("HVDBENCH_PYTHON_TF", raising=False)
    assert envs.interpreter("tensorflow") is None and not envs.split()
    monkeypatch.setenv("HVDBENCH_PYTHON_TF", sys.executable)
    assert envs.interpreter("tensorflow") is None and not envs.split()
    monkeypatch.setenv("HVDBENCH_PYTHON_TF", str(other_env / "bin" / "python"))
    assert envs.interpreter("tensorflow") == str(other_env / "bin" / "python") and envs.split()
    assert envs.interpreter("torch") is None


@pytest.mark.multiproc
def test_interpreter_that_does_not_run_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HVDBENCH_PYTHON_TF", str(tmp_path / "bin" / "python"))
    r = subprocess.run([*BENCH, "tf-horovod", "--np", "2"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "HVDBENCH_PYTHON_TF=" in r.stderr and "not an executable Python interpreter" in r.stderr


@pytest.mark.multiproc
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


@pytest.mark.multiproc
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


@pytest.mark.multiproc
def test_run_config_given_inline_is_the_same_as_a_file(tmp_path):
    cfg = {"mode": "torch-single", "model": "nope"}
    r = subprocess.run([*BENCH, "run", json.dumps(cfg)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "nope" in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr


@pytest.mark.multiproc
def test_verify_across_frameworks_needs_one_environment(other_env):
    r = subprocess.run([*BENCH, "verify", "--framework", "both"], capture_output=True, text=True, timeout=120,
                       env=split_env(other_env))
    assert r.returncode == 1 and "--framework torch and --framework tf" in r.stderr, r.stderr


@pytest.mark.multiproc
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


def test_library_problems():
    prefix = "/opt/hvdbench/torch"
    ok = {"prefix": prefix, "loaded_libraries": {"nccl": [f"{prefix}/nvidia/nccl/lib/libnccl.so.2"],
                                                 "cudart": [f"{prefix}/nvidia/cu13/lib/libcudart.so.13"]}}
    record = {"image": {"flavor": "cuda"}, "environments": {"torch": ok}}
    assert library_problems(record) == []
    two = dict(ok, loaded_libraries=dict(ok["loaded_libraries"], nccl=[
        f"{prefix}/nvidia/nccl/lib/libnccl.so.2", "/opt/hvdbench/tf/nvidia/nccl/lib/libnccl.so.2"]))
    problems = library_problems({"environments": {"torch": two}})
    assert any("2 nccl libraries in one process" in p for p in problems)
    assert any("nccl from outside its environment" in p and "/opt/hvdbench/tf/" in p for p in problems)
    none = dict(ok, loaded_libraries={})
    assert library_problems({"environments": {"torch": none}}) == []  # the CPU image: nothing to load
    assert any("no cudart loaded" in p for p in library_problems({"image": {"flavor": "cuda"},
                                                                  "environments": {"torch": none}}))
    assert library_problems({"environments": {"tensorflow": {"python": "x", "error": "boom"}}}) == ["tensorflow: boom"]
    assert library_lines(record) == [f"torch cudart {prefix}/nvidia/cu13/lib/libcudart.so.13",
                                     f"torch nccl {prefix}/nvidia/nccl/lib/libnccl.so.2"]


def test_the_docs_give_the_gpu_flag_and_the_driver_the_cuda_image_needs():
    """What a user reads before `docker run --gpus all hvdbench ...`: the flag and the driver CUDA 13 needs,
    the same driver the image's label and its no-GPU message name."""
    for doc in ("README.md", "docs/images.md"):
        text = " ".join((ROOT / doc).read_text().split())
        assert "--gpus all" in text and f"{envs.MIN_DRIVER} or newer" in text, doc
    assert f'io.hvdbench.driver-min="{envs.MIN_DRIVER}"' in (ROOT / "docker" / "Dockerfile.cuda").read_text()


def test_tensorflows_start_up_chatter_is_dropped_and_every_other_line_passes(capfd, monkeypatch):
    """What TensorFlow's C++ start-up writes to descriptor 2 (real lines, from the CPU and CUDA builds) is
    dropped; anything else, a warning or an error of ours or of the library, comes through whole."""
    import os

    from bench.tfutil import VERBOSE_ENV, quiet_startup

    chatter = [
        b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        b"I0000 00:00:1795473664.446373   19207 port.cc:153] oneDNN custom operations are on. You may see "
        b"slightly different numerical results",
        b"I0000 00:00:1795473664.486691   19207 cpu_feature_guard.cc:227] This TensorFlow binary is optimized",
        b"To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with "
        b"the appropriate compiler flags.",
        b"E0000 00:00:1795473664.5 19207 cuda_executor.cc:1228] failed call to cuInit: UNKNOWN ERROR (303)",
    ]
    kept = [b"W tensorflow: a real warning", b"E0000 00:00:1.0 1 kernel.cc:1] out of memory", b"last words"]
    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    with quiet_startup():
        os.write(2, b"\n".join([chatter[0], kept[0], *chatter[1:3]]) + b"\n")
        os.write(2, b"\n".join([chatter[3], kept[1], chatter[4], kept[2]]))  # no newline at the end
    assert capfd.readouterr().err.encode() == b"\n".join(kept)
    monkeypatch.setenv(VERBOSE_ENV, "1")
    with quiet_startup():
        os.write(2, chatter[1] + b"\n")
    assert capfd.readouterr().err.encode() == chatter[1] + b"\n"
