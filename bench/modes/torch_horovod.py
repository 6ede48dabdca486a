"""torch-horovod: PyTorch with Horovod's DistributedOptimizer (NCCL on GPU, Gloo or MPI on CPU)."""

from __future__ import annotations

from typing import Any

import torch

from bench import env
from bench.config import Precision, RunConfig
from bench.errors import BenchError
from bench.launch import LaunchInfo, spawn_horovod_gloo
from bench.modes.torch_common import TorchTrainer, resolve


def _import_hvd():
    try:
        import horovod.torch as hvd
    except ImportError as exc:
        raise BenchError(f"torch-horovod needs Horovod built with PyTorch support ({exc}); "
                         "run 'make venv' or use the hvdbench image") from None
    return hvd


def preflight(cfg: RunConfig, launch: LaunchInfo) -> RunConfig:
    _import_hvd()
    return resolve(cfg, launch)


def spawn(cfg: RunConfig) -> None:
    spawn_horovod_gloo(cfg.mode, cfg.np, cfg.to_json(), cfg.rendezvous_timeout)


def make_trainer(cfg: RunConfig, launch: LaunchInfo) -> TorchTrainer:
    return HorovodTrainer(cfg, launch)


class HorovodTrainer(TorchTrainer):
    def setup(self) -> None:
        hvd = self.hvd = _import_hvd()
        hvd.init()
        if hvd.rank() != self.rank or hvd.size() != self.world_size:
            raise BenchError(f"Horovod says rank {hvd.rank()}/{hvd.size()} but the launcher said "
                             f"{self.rank}/{self.world_size}")
        self.model = self.build_model()
        optimizer = self.build_optimizer(self.model.parameters())
        compression = hvd.Compression.fp16 if self.cfg.fp16_allreduce else hvd.Compression.none
        self.optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=self.model.named_parameters(),
                                                  compression=compression, op=hvd.Average)
        # Identical start on every rank: weights and optimizer state from rank 0.
        hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(self.optimizer, root_rank=0)
        if self.cfg.precision == Precision.amp_fp16:
            self.scaler = torch.amp.GradScaler("cuda")
        self.build_data()

    def step(self) -> None:
        if self.scaler is None:
            return super().step()
        # Horovod with a GradScaler: finish the allreduce before the scaler inspects gradients.
        self.optimizer.zero_grad()
        with self.autocast():
            from bench.models.torch_models import loss_fn

            loss = loss_fn(self.model(self.data), self.target)
        self.scaler.scale(loss).backward()
        self.optimizer.synchronize()
        with self.optimizer.skip_synchronize():
            self.scaler.step(self.optimizer)
        self.scaler.update()

    def allgather(self, obj: Any) -> list[Any]:
        return self.hvd.allgather_object(obj)

    def environment(self) -> dict[str, Any]:
        record = super().environment()
        record["horovod"] = env.horovod_info("torch")
        record["distribution"] = {"library": "horovod",
                                  "controller": "mpi" if self.hvd.mpi_enabled() else "gloo",
                                  "nccl": bool(self.hvd.nccl_built()) and self.device.type == "cuda"}
        return record

    def teardown(self) -> None:
        self.hvd.shutdown()
