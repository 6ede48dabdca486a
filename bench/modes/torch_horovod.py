"""torch-horovod: PyTorch with Horovod's DistributedOptimizer (NCCL on GPU, Gloo or MPI on CPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from bench.distributed import hvdist
from bench.hooks import Hooks
from bench.launching import horovod_gloo
from bench.launching.detect import LaunchInfo
from bench.modes.torch_common import TorchTrainer, resolve
from bench.vocabulary import Precision

if TYPE_CHECKING:  # the run configuration imports the mode registry to check a run
    from bench.config import RunConfig



def preflight(cfg: RunConfig, launch: LaunchInfo) -> RunConfig:
    hvdist.import_hvd("torch", cfg.mode)
    return resolve(cfg, launch)


def spawn(cfg: RunConfig) -> None:
    horovod_gloo.spawn(cfg.mode, cfg.np, cfg.to_json(), cfg.rendezvous_timeout)


def make_trainer(cfg: RunConfig, launch: LaunchInfo, hooks: Hooks) -> TorchTrainer:
    return HorovodTrainer(cfg, launch, hooks)


class HorovodTrainer(TorchTrainer):
    densifies_sparse = True  # DistributedOptimizer(sparse_as_dense=True); else sparse gradients are allgathered
    # Horovod's allreduce takes contiguous tensors only, and an NHWC weight's gradient is NHWC: --channels-last lays
    # out the inputs (and so the activations and the kernels chosen) only, the weights stay NCHW.
    channels_last_weights = False

    def setup(self) -> None:
        hvd = self.hvd = hvdist.import_hvd("torch", self.cfg.mode)
        hvdist.init(hvd, self.rank, self.world_size, self.cfg)
        self.model = self.compile(self.build_model())
        optimizer = self.build_optimizer(self.model.parameters())
        compression = hvd.Compression.fp16 if self.cfg.fp16_allreduce else hvd.Compression.none
        if self.hooks.fault == "skip-allreduce":  # bench verify's negative control: no DistributedOptimizer
            self.optimizer = optimizer
        else:
            self.optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=self.model.named_parameters(),
                                                      compression=compression, op=hvd.Average,
                                                      sparse_as_dense=self.cfg.sparse_as_dense)
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
        mark = self.mark
        with mark("data"):
            self.next_batch()
        self.optimizer.zero_grad()
        with mark("forward"), self.autocast():
            from bench.models.torch_loss import loss_fn

            loss = loss_fn(self.model(self.data), self.target, self.cfg.label_smoothing)
        self.track(loss)
        with mark("backward"):
            self.scaler.scale(loss).backward()
        with mark("optimizer"):
            self.optimizer.synchronize()
            with self.optimizer.skip_synchronize():
                self.scaler.step(self.optimizer)
            self.scaler.update()

    def exchange(self) -> None:
        """The DistributedOptimizer's exchange alone: an averaging allreduce of every gradient, submitted together
        and fused by Horovod as in a step (fp16 under --fp16-allreduce)."""
        dtype = torch.float16 if self.cfg.fp16_allreduce else torch.float32
        handles = [self.hvd.allreduce_async_(b, op=self.hvd.Average, name=f"hvdbench.exchange.{i}")
                   for i, b in enumerate(self.gradient_buffers(dtype))]
        for handle in handles:
            self.hvd.synchronize(handle)

    def allgather(self, obj: Any) -> list[Any]:
        return hvdist.allgather_object(self.hvd, obj)

    def environment(self) -> dict[str, Any]:
        return {**super().environment(),
                **hvdist.environment(self.hvd, "torch", self.device.type == "cuda")}

    def teardown(self) -> None:
        self.hvd.shutdown()
