"""torch-ddp: PyTorch DistributedDataParallel, NCCL on GPU, Gloo on CPU."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from bench.distributed import torchdist
from bench.errors import BenchError
from bench.hooks import Hooks
from bench.launching.detect import LaunchInfo
from bench.launching.supervise import spawn_local
from bench.modes.torch_common import TorchTrainer, resolve
from bench.vocabulary import Device, Precision

if TYPE_CHECKING:  # the run configuration imports the mode registry to check a run
    from bench.config import RunConfig



def preflight(cfg: RunConfig, launch: LaunchInfo) -> RunConfig:
    cfg = resolve(cfg, launch)
    if cfg.sparse_embeddings and not cfg.sparse_as_dense:
        if cfg.device == Device.cuda:
            raise BenchError("torch-ddp --sparse-embeddings on GPU: NCCL has no sparse allreduce (only Gloo "
                             "does); add --sparse-as-dense, or use torch-horovod, which allgathers it")
        if cfg.fp16_allreduce:
            raise BenchError("torch-ddp: --fp16-allreduce (DDP's fp16 compression hook) cannot take sparse "
                             "gradients; drop one of --fp16-allreduce, --sparse-embeddings")
    return cfg


def spawn(cfg: RunConfig) -> None:
    spawn_local([cfg.mode], cfg.np, cfg.to_json())


def make_trainer(cfg: RunConfig, launch: LaunchInfo, hooks: Hooks) -> TorchTrainer:
    return DDPTrainer(cfg, launch, hooks)


class DDPTrainer(TorchTrainer):
    def setup(self) -> None:
        self.backend = torchdist.init_group(self.launch, self.device, self.cfg.rendezvous_timeout)
        model = self.build_model()
        ids = [self.device.index] if self.device.type == "cuda" else None
        self.model = self.compile(torch.nn.parallel.DistributedDataParallel(model, device_ids=ids))
        if self.cfg.fp16_allreduce:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            self.model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        self.optimizer = self.build_optimizer(self.model.parameters())
        if self.cfg.precision == Precision.amp_fp16:
            self.scaler = torch.amp.GradScaler("cuda")
        self.build_data()

    def step(self) -> None:
        if self.hooks.fault == "skip-allreduce":  # bench verify's negative control
            with self.model.no_sync():
                return super().step()
        return super().step()

    def exchange(self) -> None:
        """DDP's exchange alone: an allreduce of each of its gradient buckets (the sizes DDP built, from its own
        logging data; else its default 25 MiB cap), in fp16 under --fp16-allreduce's compression hook."""
        import torch.distributed as dist

        if getattr(self, "_buckets", None) is None:
            dtype = torch.float16 if self.cfg.fp16_allreduce else torch.float32
            sizes = ddp_bucket_bytes(self.model) or default_buckets(
                [b.numel() * 4 for b in self.gradient_buffers(torch.float32)])
            self._buckets = [torch.zeros(max(1, n // 4), dtype=dtype, device=self.device) for n in sizes]
        for bucket in self._buckets:
            dist.all_reduce(bucket)

    def allgather(self, obj: Any) -> list[Any]:
        return torchdist.allgather(obj)

    def environment(self) -> dict[str, Any]:
        record = super().environment()
        record["distribution"] = {"library": "torch.distributed", "backend": self.backend,
                                  "nccl_socket_ifname": os.environ.get("NCCL_SOCKET_IFNAME")}
        return record

    def teardown(self) -> None:
        torchdist.close_group()
        self.model = None  # the Reducer and its process group go now, with no collective in flight


def ddp_bucket_bytes(model) -> list[int]:
    """The byte size of each gradient bucket DDP built (fp32 gradients), from its logging data; [] if absent."""
    try:
        text = model._get_ddp_logging_data().get("bucket_sizes", "")
    except (AttributeError, RuntimeError):
        return []
    return [int(n) for n in str(text).split(",") if n.strip().isdigit()]


def default_buckets(gradient_bytes: list[int], first: int = 1 << 20, cap: int = 25 << 20) -> list[int]:
    """DDP's default bucketing of gradients (in reverse order): a first bucket of 1 MiB, then 25 MiB ones."""
    buckets, size, limit = [], 0, first
    for n in reversed(gradient_bytes):
        size += n
        if size >= limit:
            buckets.append(size)
            size, limit = 0, cap
    if size:
        buckets.append(size)
    return buckets
