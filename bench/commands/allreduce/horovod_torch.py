"""allreduce through Horovod from PyTorch: ``hvd.allreduce_`` (op=Sum) in place on a torch tensor;
allgather: ``hvd.allgather``."""

from __future__ import annotations

from bench.commands.allreduce.common import Comm
from bench.commands.allreduce.horovod import HorovodComm, spawn_with
from bench.commands.allreduce.torch_dist import TorchBuffer, default_np  # noqa: F401 (the backend's default_np)
from bench.launching.detect import LaunchInfo


def spawn(cfg) -> None:
    spawn_with("torch", cfg)


def make(cfg, launch: LaunchInfo) -> Comm:
    return HorovodTorchComm(cfg, launch)


class HorovodTorchComm(HorovodComm, TorchBuffer):
    framework = "torch"

    def __init__(self, cfg, launch: LaunchInfo) -> None:
        TorchBuffer.__init__(self, cfg, launch)
        self.on_gpu = self.device.type == "cuda"

    def op_allreduce(self):
        self.out = self.buf  # in place
        return lambda: self.hvd.allreduce_(self.buf, op=self.hvd.Sum, name="bench.allreduce")
