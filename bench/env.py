"""The environment recorded with every result and printed by ``bench env``.

Framework parts are collected only for frameworks already imported by the mode (or, for
``bench env``, importable): recording never pays for an import the run did not need.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import socket
import subprocess
import sys
from typing import Any

from bench import __version__


def _first_line(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


@functools.lru_cache(maxsize=1)
def mpi_version() -> str | None:
    return _first_line(["mpirun", "--version"])


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def container() -> str | None:
    if os.environ.get("APPTAINER_CONTAINER") or os.environ.get("SINGULARITY_CONTAINER"):
        return "apptainer/singularity"
    if os.path.exists("/.dockerenv"):
        return "docker"
    if os.path.exists("/run/.containerenv"):
        return "podman"
    return None


def base() -> dict[str, Any]:
    return {
        "hvdbench": __version__,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "mpi": mpi_version(),
        "container": container(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }


def nvml_driver() -> str | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else version
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return None


def torch_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"version": torch.__version__, "cuda": torch.version.cuda,
                            "cudnn": None, "nccl": None, "gpus": []}
    if torch.cuda.is_available():
        info["cudnn"] = torch.backends.cudnn.version()
        try:
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except (AttributeError, RuntimeError):
            pass
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            info["gpus"].append({"index": i, "name": p.name, "memory_gib": round(p.total_memory / 2**30, 2),
                                 "capability": f"{p.major}.{p.minor}"})
        info["driver"] = nvml_driver()
    return info


def tf_info() -> dict[str, Any]:
    from bench.tfutil import import_tf

    tf, keras = import_tf()
    build = tf.sysconfig.get_build_info()
    gpus = []
    for g in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(g)
        gpus.append({"name": details.get("device_name"), "capability": details.get("compute_capability")})
    return {"version": tf.__version__, "keras": f"tf-keras {keras.__version__}",
            "cuda": build.get("cuda_version"), "cudnn": build.get("cudnn_version"), "gpus": gpus}


def horovod_info(framework: str = "torch") -> dict[str, Any]:
    import importlib

    hvd = importlib.import_module(f"horovod.{framework}")
    import horovod

    return {"version": horovod.__version__, "mpi_built": bool(hvd.mpi_built()),
            "gloo_built": bool(hvd.gloo_built()), "nccl_built": bool(hvd.nccl_built())}


def full() -> dict[str, Any]:
    """Everything importable here (``bench env``)."""
    import importlib.util

    record = base()
    if importlib.util.find_spec("torch"):
        record["torch"] = torch_info()
    if importlib.util.find_spec("tensorflow"):
        record["tensorflow"] = tf_info()
    if importlib.util.find_spec("horovod"):
        try:
            record["horovod"] = horovod_info("torch")
        except ImportError as exc:
            record["horovod"] = {"error": str(exc)}
    record["driver"] = nvml_driver()
    return record
