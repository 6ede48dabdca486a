"""allreduce through torch.distributed: ``dist.all_reduce`` in place (NCCL on GPU, Gloo on CPU); allgather:
``dist.all_gather`` into views of one output buffer."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from bench.commands.allreduce.common import Comm
from bench.distributed import torchdist
from bench.launching.detect import LaunchInfo
from bench.launching.supervise import spawn_local
from bench.records import env


def default_np(cfg) -> int:
    return torchdist.gpu_count() if torchdist.use_cuda(cfg.device) else 2


def spawn(cfg) -> None:
    spawn_local(["allreduce"], cfg.np, cfg.to_json())


def make(cfg, launch: LaunchInfo) -> Comm:
    return TorchComm(cfg, launch)


class TorchBuffer(Comm):
    """A float32 torch tensor on the local rank's GPU (or the CPU), reduced in place."""

    def __init__(self, cfg, launch: LaunchInfo) -> None:
        self.cfg, self.launch = cfg, launch
        self.rank, self.world_size = launch.rank, launch.world_size
        self.device = torchdist.pin(torchdist.use_cuda(cfg.device), launch)
        self.buf = None

    def fill(self, count: int) -> None:
        self.buf = torch.full((count,), float(self.rank + 1), dtype=torch.float32, device=self.device)
        self.out = None  # an allgather's result

    def result(self):
        return self.out.detach().cpu().numpy()

    def zero(self) -> None:
        self.buf.zero_()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def release(self) -> None:
        self.buf = self.out = None


class TorchComm(TorchBuffer):
    def setup(self) -> None:
        self.backend = torchdist.init_group(self.launch, self.device, self.cfg.rendezvous_timeout)

    def op_allreduce(self):
        self.out = self.buf  # in place
        return lambda: dist.all_reduce(self.buf)

    def op_alltoall(self):
        self.out = torch.empty_like(self.buf)
        return lambda: dist.all_to_all_single(self.out, self.buf)

    def op_allgather(self):  # into views of one preallocated output (Horovod allocates its own)
        self.out = torch.empty(self.world_size * self.buf.numel(), dtype=torch.float32, device=self.device)
        return lambda: dist.all_gather(list(self.out.chunk(self.world_size)), self.buf)

    def barrier(self) -> None:
        dist.barrier()

    def allgather(self, obj: Any) -> list[Any]:
        return torchdist.allgather(obj)

    def environment(self) -> dict[str, Any]:
        return {**env.base(), "torch": env.torch_info(), "library": "torch.distributed", "backend": self.backend,
                "transport": f"torch.distributed {self.backend}", "device": str(self.device)}

    def teardown(self) -> None:
        torchdist.close_group()
