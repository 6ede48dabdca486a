"""What the Horovod modes share, for either framework (imports Horovod's framework module lazily)."""

from __future__ import annotations

import importlib
from typing import Any

from bench import env
from bench.config import RunConfig
from bench.errors import BenchError
from bench.launch import spawn_horovod_gloo

NAMES = {"torch": "PyTorch", "tensorflow": "TensorFlow"}


def import_hvd(framework: str, mode: str):
    """horovod.torch or horovod.tensorflow, or one clear error."""
    try:
        return importlib.import_module(f"horovod.{framework}")
    except ImportError as exc:
        raise BenchError(f"{mode} needs Horovod built with {NAMES[framework]} support ({exc}); "
                         "run 'make venv' or use the hvdbench image") from None


def init(hvd, rank: int, world_size: int) -> None:
    """hvd.init(), then check Horovod agrees with the launcher about who is who."""
    hvd.init()
    if hvd.rank() != rank or hvd.size() != world_size:
        raise BenchError(f"Horovod says rank {hvd.rank()}/{hvd.size()} but the launcher said {rank}/{world_size}")


def spawn(cfg: RunConfig) -> None:
    spawn_horovod_gloo(cfg.mode, cfg.np, cfg.to_json(), cfg.rendezvous_timeout)


def environment(hvd, framework: str, on_gpu: bool) -> dict[str, Any]:
    return {"horovod": env.horovod_info(framework),
            "distribution": {"library": "horovod", "controller": "mpi" if hvd.mpi_enabled() else "gloo",
                             "nccl": bool(hvd.nccl_built()) and on_gpu}}
