"""torch-ddp: PyTorch DistributedDataParallel, NCCL on GPU, Gloo on CPU."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from bench.config import Precision, RunConfig
from bench.errors import BenchError
from bench.launch import LaunchInfo, spawn_local
from bench.modes.torch_common import TorchTrainer, resolve

COLLECTIVE_TIMEOUT = timedelta(minutes=10)


def preflight(cfg: RunConfig, launch: LaunchInfo) -> RunConfig:
    return resolve(cfg, launch)


def spawn(cfg: RunConfig) -> None:
    spawn_local([cfg.mode], cfg.np, cfg.to_json())


def make_trainer(cfg: RunConfig, launch: LaunchInfo) -> TorchTrainer:
    return DDPTrainer(cfg, launch)


class DDPTrainer(TorchTrainer):
    def setup(self) -> None:
        addr, port = self.launch.master_addr, self.launch.master_port
        if not addr or not port:
            raise BenchError(f"{self.launch.launcher} did not provide MASTER_ADDR and MASTER_PORT "
                             "for the torch-ddp rendezvous; set them")
        timeout = timedelta(seconds=self.cfg.rendezvous_timeout)
        try:
            store = dist.TCPStore(addr, port, self.world_size, is_master=self.rank == 0, timeout=timeout,
                                  wait_for_workers=True)
        except (RuntimeError, dist.DistError) as exc:
            raise BenchError(f"rendezvous at {addr}:{port} failed or timed out after "
                             f"{self.cfg.rendezvous_timeout:g} s ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:200]})") from None
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        kwargs = {"device_id": self.device} if backend == "nccl" else {}
        dist.init_process_group(backend, store=store, rank=self.rank, world_size=self.world_size,
                                timeout=COLLECTIVE_TIMEOUT, **kwargs)
        self.backend = backend
        model = self.build_model()
        ids = [self.device.index] if self.device.type == "cuda" else None
        self.model = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
        if self.cfg.fp16_allreduce:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            self.model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        self.optimizer = self.build_optimizer(self.model.parameters())
        if self.cfg.precision == Precision.amp_fp16:
            self.scaler = torch.amp.GradScaler("cuda")
        self.build_data()

    def allgather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def environment(self) -> dict[str, Any]:
        record = super().environment()
        record["distribution"] = {"library": "torch.distributed", "backend": self.backend,
                                  "nccl_socket_ifname": os.environ.get("NCCL_SOCKET_IFNAME")}
        return record

    def teardown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
