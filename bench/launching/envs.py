"""Which Python environment holds each framework, and what a run says when a GPU machine gives it no GPU.

One environment normally holds both frameworks (the local venv, the CPU image). The CUDA image keeps them
apart: PyTorch's CUDA 13 wheels and TensorFlow's CUDA 12 wheels both install into ``site-packages/nvidia/nccl``
and ``nvidia/cudnn``, so one environment would leave one framework loading the other's NCCL and cuDNN. There
``HVDBENCH_PYTHON_TORCH`` and ``HVDBENCH_PYTHON_TF`` name each framework's interpreter, and a bench command
that needs a framework re-executes itself with that interpreter (:func:`enter`: ``os.execv``, so the process
id, its environment and its launcher's rank variables stay the same; ``srun``, ``mpirun`` and ``horovodrun``
see no difference).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bench.errors import BenchError
from bench.measure.nvml import load_nvml

PYTHON_ENV = {"torch": "HVDBENCH_PYTHON_TORCH", "tensorflow": "HVDBENCH_PYTHON_TF"}
FLAVOR_ENV = "HVDBENCH_IMAGE_FLAVOR"
# CUDA 13.0's minimum Linux driver (the torch environment), and CUDA 12's (TensorFlow's in the CUDA image): the
# oldest driver each major version runs on, by minor-version compatibility (NVIDIA's CUDA release notes).
MIN_DRIVER = "580.65.06"
MIN_DRIVER_CUDA12 = "525.60.13"


def _root(python: str) -> Path:
    """The environment an interpreter belongs to: a venv's bin/python sits in <venv>/bin."""
    return Path(python).absolute().parent.parent.resolve()


def interpreter(framework: str) -> str | None:
    """The interpreter of the environment that holds ``framework`` when that is not this one, else None."""
    name = PYTHON_ENV.get(framework)
    path = os.environ.get(name) if name else None
    if not path or _root(path) == Path(sys.prefix).resolve():
        return None
    if not os.access(path, os.X_OK):
        raise BenchError(f"{name}={path} is not an executable Python interpreter")
    return path


def split() -> bool:
    """Whether the frameworks live in different environments (then no process can import both)."""
    roots = {_root(os.environ.get(v) or sys.executable) for v in PYTHON_ENV.values()}
    return len(roots) > 1


def python_command(python: str | None = None) -> list[str]:
    """The start of a command that runs this bench's code in a new process (a rank, a sweep's cell, a loader's
    probe): the interpreter with ``-P`` (Python 3.11 on), so that the folder it starts in is not put first on
    sys.path, where a ``bench/`` folder (a checkout's, say) would stand in for the bench this process runs.
    The new process runs the same bench: where that is not an installed package (a checkout run as ``python -m
    bench`` or installed in editable mode), its folder goes first on PYTHONPATH, here in this process's
    environment, which every process it starts inherits."""
    home = str(Path(__file__).resolve().parents[2])  # the folder holding this bench package
    import site

    installed = {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if home not in installed and (not paths or paths[0] != home):
        os.environ["PYTHONPATH"] = os.pathsep.join([home, *(p for p in paths if p != home)])
    return [python or sys.executable, *(["-P"] if sys.version_info >= (3, 11) else [])]


def bench_command(python: str | None = None) -> list[str]:
    """``python -P -m bench`` (:func:`python_command`); the bench command's arguments follow."""
    return [*python_command(python), "-m", "bench"]


def enter(framework: str, args: list[str] | None = None) -> None:
    """Continue in ``framework``'s environment: exec ``python -m bench ARGS`` there (default: this command's
    own arguments). Returns only when this process already is in that environment."""
    python = interpreter(framework)
    if python is None:
        return
    args = sys.argv[1:] if args is None else args
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(python, [*bench_command(python), *args])


def nvidia_gpus() -> int:
    """The NVIDIA GPUs NVML sees on this host (0 where NVML is absent or fails to start, as on a machine without
    the driver); 0 too where CUDA_VISIBLE_DEVICES hides every GPU on purpose ("" or -1)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1"):
        return 0
    nvml, _ = load_nvml()
    if nvml is None:
        return 0
    try:
        return nvml.nvmlDeviceGetCount()
    except nvml.NVMLError:
        return 0
    finally:
        nvml.nvmlShutdown()


def no_gpu(framework: str, why: str) -> None:
    """``--device auto`` found no GPU: fine on a machine without one, but where the host has NVIDIA GPUs (NVML
    counts them) or in the CUDA image, a silent CPU run would benchmark the wrong thing: one line says why the
    framework sees none (``why``: its CPU build, or the driver its CUDA needs) and how to run either way."""
    if os.environ.get(FLAVOR_ENV) == "cuda":
        raise BenchError(
            f"no GPU is visible to {framework} in this CUDA image. Start it with the GPUs: docker run --gpus all "
            "(NVIDIA Container Toolkit), apptainer/singularity exec --nv, or srun --gpus-per-task=1; the image "
            f"needs NVIDIA driver {MIN_DRIVER} or newer (CUDA 13). To run on the CPU instead, pass --device cpu "
            "(or use the CPU image, hvdbench:current-cpu)")
    count = nvidia_gpus()
    if count:
        raise BenchError(f"this machine has {count} NVIDIA GPU(s), but {framework} sees none: {why}. A run would "
                         "measure the CPU: pass --device cpu to measure the CPU on purpose, or "
                         "CUDA_VISIBLE_DEVICES= to hide the GPUs")


TF_CPU_BUILD = ("this environment's TensorFlow is its CPU build (tensorflow-cpu, what make venv installs: TensorFlow's "
                "CUDA 12 wheels cannot share one environment with PyTorch's CUDA 13 wheels); the CUDA image holds a "
                "CUDA TensorFlow in an environment of its own (make image, then docker run --gpus all; or make sif, "
                "then apptainer exec --nv)")


def torch_why(cuda_version: str | None) -> str:
    """Why PyTorch sees no GPU on a host NVML finds GPUs on, from the CUDA its wheel was built for."""
    if cuda_version is None:
        return ("this environment's PyTorch is a CPU wheel; PyPI's torch is the CUDA 13 build "
                f"(pip install torch from PyPI), which needs NVIDIA driver {MIN_DRIVER} or newer")
    return (f"its CUDA {cuda_version} build needs a newer driver (CUDA 13: {MIN_DRIVER} or newer; nvidia-smi "
            "shows the driver), or CUDA_VISIBLE_DEVICES names no GPU that exists")
