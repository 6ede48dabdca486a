"""allreduce through Horovod (``--backend horovod-torch`` or ``horovod-tf``): hvd.allreduce with op=Sum.

NCCL on GPU (Horovod built with HOROVOD_GPU_OPERATIONS=NCCL), Gloo or MPI on CPU. Started like the
Horovod modes: self-spawned with the Gloo controller, or under horovodrun, mpirun or srun --mpi=pmix.
"""

from __future__ import annotations

from typing import Any

from bench import env
from bench.allreduce.common import Comm
from bench.launch import LaunchInfo, spawn_horovod_gloo
from bench.modes import horovod_common


def _framework(cfg) -> str:
    return "torch" if cfg.backend == "horovod-torch" else "tensorflow"


def default_np(cfg) -> int:
    if _framework(cfg) == "torch":
        from bench.allreduce import torch_dist

        return torch_dist.default_np(cfg)
    from bench.allreduce import tf_collective

    return tf_collective.default_np(cfg)


def spawn(cfg) -> None:
    horovod_common.import_hvd(_framework(cfg), f"allreduce --backend {cfg.backend}")
    spawn_horovod_gloo("allreduce", cfg.np, cfg.to_json(), cfg.rendezvous_timeout)


def make(cfg, launch: LaunchInfo) -> Comm:
    return HorovodTorchComm(cfg, launch) if _framework(cfg) == "torch" else HorovodTFComm(cfg, launch)


class _HorovodComm(Comm):
    framework = "torch"

    def __init__(self, cfg, launch: LaunchInfo) -> None:
        self.cfg, self.launch = cfg, launch
        self.rank, self.world_size = launch.rank, launch.world_size

    def setup(self) -> None:
        self.hvd = horovod_common.import_hvd(self.framework, f"allreduce --backend {self.cfg.backend}")
        horovod_common.init(self.hvd, self.rank, self.world_size)

    def allgather(self, obj: Any) -> list[Any]:
        return self.hvd.allgather_object(obj)

    def environment(self) -> dict[str, Any]:
        gpu = self.on_gpu
        info = horovod_common.environment(self.hvd, self.framework, gpu)
        controller = info["distribution"]["controller"]
        return {**env.base(), **info, "library": "horovod", "device": "cuda" if gpu else "cpu",
                "transport": f"horovod {'nccl' if gpu and info['distribution']['nccl'] else controller}"}

    def teardown(self) -> None:
        self.hvd.shutdown()


class HorovodTorchComm(_HorovodComm):
    framework = "torch"

    def setup(self) -> None:
        import torch

        from bench.allreduce.torch_dist import use_cuda

        super().setup()
        self.torch = torch
        self.on_gpu = use_cuda(self.cfg)
        if self.on_gpu:
            torch.cuda.set_device(self.launch.local_rank % torch.cuda.device_count())
        self.device = torch.device("cuda" if self.on_gpu else "cpu")

    def prepare(self, count: int):
        self.buf = self.torch.full((count,), float(self.rank + 1), dtype=self.torch.float32, device=self.device)
        return lambda: self.hvd.allreduce_(self.buf, op=self.hvd.Sum, name="bench.allreduce")

    def result_equals(self, value: float) -> bool:
        return bool((self.buf == value).all())

    def zero(self) -> None:
        self.buf.zero_()

    def sync(self) -> None:
        if self.on_gpu:
            self.torch.cuda.synchronize()

    def release(self) -> None:
        self.buf = None


class HorovodTFComm(_HorovodComm):
    framework = "tensorflow"

    def setup(self) -> None:
        from bench.allreduce.tf_collective import pin_device

        self.tf, self.device = pin_device(self.cfg, self.launch)
        self.on_gpu = self.device.startswith("/gpu")
        super().setup()

    def prepare(self, count: int):
        tf = self.tf
        with tf.device(self.device):
            self.buf = tf.fill([count], tf.constant(self.rank + 1, tf.float32))
        self.out = None

        def op():
            self.out = self.hvd.allreduce(self.buf, op=self.hvd.Sum, name="bench.allreduce")
        return op

    def result_equals(self, value: float) -> bool:
        return bool(self.tf.reduce_all(self.tf.equal(self.out, value)).numpy())

    def zero(self) -> None:
        self.buf = self.tf.zeros_like(self.buf)

    def sync(self) -> None:
        if self.out is not None:
            self.out[:1].numpy()  # completes the allreduce that produced it

    def release(self) -> None:
        self.buf = self.out = None
