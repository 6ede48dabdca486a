"""torch-ddp: PyTorch DistributedDataParallel, NCCL on GPU, Gloo on CPU."""

from __future__ import annotations

import os
import time
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


def init_group(launch: LaunchInfo, device: torch.device, rendezvous_timeout: float) -> str:
    """torch.distributed's default group over a TCPStore at MASTER_ADDR:MASTER_PORT; returns the backend
    (NCCL on GPU, Gloo on CPU)."""
    addr, port = launch.master_addr, launch.master_port
    if not addr or not port:
        raise BenchError(f"{launch.launcher} did not provide MASTER_ADDR and MASTER_PORT "
                         "for the torch.distributed rendezvous; set them")
    timeout = timedelta(seconds=rendezvous_timeout)
    try:
        store = dist.TCPStore(addr, port, launch.world_size, is_master=launch.rank == 0, timeout=timeout,
                              wait_for_workers=True)
    except (RuntimeError, dist.DistError) as exc:
        raise BenchError(f"rendezvous at {addr}:{port} failed or timed out after {rendezvous_timeout:g} s "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from None
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, store=store, rank=launch.rank, world_size=launch.world_size,
                            timeout=COLLECTIVE_TIMEOUT, **kwargs)
    return backend


def close_group() -> None:
    """Destroy the default group once no collective is in flight.

    Gloo's worker threads release a finished collective's tensors under the GIL; if the main thread
    drops the last reference to the group meanwhile (holding the GIL), the two deadlock. A barrier and
    a short GIL-free pause let those threads finish first.
    """
    if dist.is_initialized():
        dist.barrier()
        time.sleep(0.1)
        dist.destroy_process_group()


class DDPTrainer(TorchTrainer):
    def setup(self) -> None:
        self.backend = init_group(self.launch, self.device, self.cfg.rendezvous_timeout)
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

    def step(self) -> None:
        if self.cfg.fault == "skip-allreduce":  # bench verify's negative control
            with self.model.no_sync():
                return super().step()
        return super().step()

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
        close_group()
        self.model = None  # the Reducer and its process group go now, with no collective in flight
