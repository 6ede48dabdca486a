"""allreduce through torch.distributed: ``dist.all_reduce`` in place (NCCL on GPU, Gloo on CPU)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from bench import env
from bench.allreduce.common import Comm
from bench.config import Device
from bench.errors import BenchError
from bench.launch import LaunchInfo, spawn_local
from bench.modes.torch_ddp import close_group, init_group


def _gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def use_cuda(cfg) -> bool:
    if cfg.device == Device.cuda and _gpus() == 0:
        raise BenchError("--device cuda was asked for, but no CUDA GPU is visible to PyTorch")
    return cfg.device == Device.cuda or (cfg.device == Device.auto and _gpus() > 0)


def default_np(cfg) -> int:
    return _gpus() if use_cuda(cfg) else 2


def spawn(cfg) -> None:
    spawn_local(["allreduce"], cfg.np, cfg.to_json())


def make(cfg, launch: LaunchInfo) -> Comm:
    return TorchComm(cfg, launch)


class TorchBuffer(Comm):
    """A float32 torch tensor on the local rank's GPU (or the CPU), reduced in place."""

    def __init__(self, cfg, launch: LaunchInfo) -> None:
        self.cfg, self.launch = cfg, launch
        self.rank, self.world_size = launch.rank, launch.world_size
        if use_cuda(cfg):
            index = launch.local_rank % _gpus()
            torch.cuda.set_device(index)
            self.device = torch.device("cuda", index)
        else:
            self.device = torch.device("cpu")
        self.buf = None

    def fill(self, count: int) -> None:
        self.buf = torch.full((count,), float(self.rank + 1), dtype=torch.float32, device=self.device)

    def result_equals(self, value: float) -> bool:
        return bool((self.buf == value).all())

    def zero(self) -> None:
        self.buf.zero_()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def release(self) -> None:
        self.buf = None


class TorchComm(TorchBuffer):
    def setup(self) -> None:
        self.backend = init_group(self.launch, self.device, self.cfg.rendezvous_timeout)

    def prepare(self, count: int):
        self.fill(count)
        return lambda: dist.all_reduce(self.buf)

    def barrier(self) -> None:
        dist.barrier()

    def allgather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def environment(self) -> dict[str, Any]:
        return {**env.base(), "torch": env.torch_info(), "library": "torch.distributed", "backend": self.backend,
                "transport": f"torch.distributed {self.backend}", "device": str(self.device)}

    def teardown(self) -> None:
        close_group()
