"""Frameworks in separate Python environments (the CUDA image): re-execution, bench env, the no-GPU message."""

import os
import subprocess
import sys
import sysconfig

import pytest

from bench.errors import BenchError
from bench.launching import envs
from bench.records.env import library_lines, library_problems
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def other_env(tmp_path_factory):
    """A second, real venv that sees this one's packages and this checkout (a .pth file), the way the CUDA
    image's TensorFlow environment is a venv of its own."""
    root = tmp_path_factory.mktemp("tfenv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "hvdbench-test.pth").write_text(f"{ROOT}\n{sysconfig.get_paths()['purelib']}\n")
    return root


def test_interpreter_is_none_for_this_environment(monkeypatch, other_env):
    monkeypatch.delenv("HVDBENCH_PYTHON_TF", raising=False)
    assert envs.interpreter("tensorflow") is None and not envs.split()
    monkeypatch.setenv("HVDBENCH_PYTHON_TF", sys.executable)
    assert envs.interpreter("tensorflow") is None and not envs.split()
    monkeypatch.setenv("HVDBENCH_PYTHON_TF", str(other_env / "bin" / "python"))
    assert envs.interpreter("tensorflow") == str(other_env / "bin" / "python") and envs.split()
    assert envs.interpreter("torch") is None


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


def test_a_new_process_runs_this_bench_not_a_bench_folder_where_it_starts(monkeypatch):
    """-P keeps the working folder off sys.path; a bench that is not an installed package (this checkout, editable)
    goes first on PYTHONPATH, once, so that the process started finds the same code."""
    here = str(ROOT.resolve())
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/elsewhere", here]))
    assert envs.bench_command() == [sys.executable, "-P", "-m", "bench"]
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [here, "/elsewhere"]
    envs.python_command("/opt/tf/bin/python")
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [here, "/elsewhere"]
    monkeypatch.delenv("PYTHONPATH")
    assert envs.python_command("/opt/tf/bin/python") == ["/opt/tf/bin/python", "-P"]
    assert os.environ["PYTHONPATH"] == here


class FakeNvml:
    """pynvml with ``count`` GPUs, or one whose start fails (a machine without the driver)."""

    class NVMLError(Exception):
        pass

    def __init__(self, count: int | None) -> None:
        self.count = count

    def nvmlInit(self):  # noqa: N802 (NVML's names)
        if self.count is None:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlDeviceGetCount(self):  # noqa: N802
        return self.count

    def nvmlShutdown(self):  # noqa: N802
        pass


@pytest.mark.parametrize("count, visible, expected", [(2, None, 2), (None, None, 0), (2, "", 0), (2, "-1", 0),
                                                      (2, "0", 2)])
def test_nvidia_gpus_counts_what_nvml_sees_unless_hidden_on_purpose(monkeypatch, count, visible, expected):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(count))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert envs.nvidia_gpus() == expected


def test_a_framework_blind_to_the_hosts_gpus_is_refused_in_one_line(monkeypatch):
    """Issue 69: the venv's tensorflow-cpu on a GPU machine benchmarked the CPU silently under --device auto."""
    monkeypatch.delenv(envs.FLAVOR_ENV, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(None))
    envs.no_gpu("TensorFlow", envs.TF_CPU_BUILD)  # no driver: a CPU machine, the CPU run it always was
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(4))
    with pytest.raises(BenchError) as caught:
        envs.no_gpu("TensorFlow", envs.TF_CPU_BUILD)
    line = str(caught.value)
    assert "\n" not in line
    for words in ("4 NVIDIA GPU(s)", "TensorFlow sees none", "tensorflow-cpu", "make image", "--gpus all",
                  "--device cpu"):
        assert words in line, words
    with pytest.raises(BenchError, match=f"a CPU wheel.*{envs.MIN_DRIVER}"):
        envs.no_gpu("PyTorch", envs.torch_why(None))
    with pytest.raises(BenchError, match=f"CUDA 13.0 build needs a newer driver .CUDA 13: {envs.MIN_DRIVER}"):
        envs.no_gpu("PyTorch", envs.torch_why("13.0"))
