"""allreduce through Horovod from TensorFlow: eager ``hvd.allreduce`` (op=Sum) of a tensor; allgather:
``hvd.allgather``."""

from __future__ import annotations

from bench.commands.allreduce.common import Comm
from bench.commands.allreduce.horovod import HorovodComm, spawn_with
from bench.commands.allreduce.tf_collective import default_np, pin_device  # noqa: F401 (the backend's default_np)
from bench.launching.detect import LaunchInfo


def spawn(cfg) -> None:
    spawn_with("tensorflow", cfg)


def make(cfg, launch: LaunchInfo) -> Comm:
    return HorovodTFComm(cfg, launch)


class HorovodTFComm(HorovodComm):
    framework = "tensorflow"

    def __init__(self, cfg, launch: LaunchInfo) -> None:
        self.cfg, self.launch = cfg, launch
        self.rank, self.world_size = launch.rank, launch.world_size
        self.out = None

    def setup(self) -> None:
        self.tf, self.device = pin_device(self.cfg, self.launch)
        self.on_gpu = self.device.startswith("/gpu")
        super().setup()

    def fill(self, count: int) -> None:
        tf = self.tf
        with tf.device(self.device):
            self.buf = tf.fill([count], tf.constant(self.rank + 1, tf.float32))
        self.out = None

    def op_allreduce(self):
        def reduce():
            self.out = self.hvd.allreduce(self.buf, op=self.hvd.Sum, name="bench.allreduce")
        return reduce

    def result(self):
        return self.out.numpy()

    def zero(self) -> None:
        self.buf = self.tf.zeros_like(self.buf)

    def sync(self) -> None:
        if self.out is not None:
            self.out[:1].numpy()  # completes the allreduce that produced it

    def release(self) -> None:
        self.buf = self.out = None
