"""tf-horovod: a compiled TensorFlow step with Horovod's DistributedGradientTape (NCCL on GPU, Gloo or MPI on CPU)."""

from __future__ import annotations

from typing import Any

from bench import env
from bench.config import RunConfig
from bench.errors import BenchError
from bench.launch import LaunchInfo, spawn_horovod_gloo
from bench.modes.tf_common import TFTrainer, optimizer_variables, resolve, tf


def _import_hvd():
    try:
        import horovod.tensorflow as hvd
    except ImportError as exc:
        raise BenchError(f"tf-horovod needs Horovod built with TensorFlow support ({exc}); "
                         "run 'make venv' or use the hvdbench image") from None
    return hvd


def preflight(cfg: RunConfig, launch: LaunchInfo) -> RunConfig:
    _import_hvd()
    return resolve(cfg, launch)


def spawn(cfg: RunConfig) -> None:
    spawn_horovod_gloo(cfg.mode, cfg.np, cfg.to_json(), cfg.rendezvous_timeout)


def make_trainer(cfg: RunConfig, launch: LaunchInfo) -> TFTrainer:
    return HorovodTFTrainer(cfg, launch)


class HorovodTFTrainer(TFTrainer):
    def setup(self) -> None:
        hvd = self.hvd = _import_hvd()
        hvd.init()
        if hvd.rank() != self.rank or hvd.size() != self.world_size:
            raise BenchError(f"Horovod says rank {hvd.rank()}/{hvd.size()} but the launcher said "
                             f"{self.rank}/{self.world_size}")
        self.build_model()
        x, y = self.make_data(self.rank)
        compression = hvd.Compression.fp16 if self.cfg.fp16_allreduce else hvd.Compression.none

        def wrap(tape):
            return hvd.DistributedGradientTape(tape, compression=compression)

        @tf.function
        def train_step():
            return self.replica_step(x, y, self.cfg.batch_size, wrap_tape=wrap)

        self._train_step = train_step
        self._first = True

    def step(self) -> None:
        self._last = self._train_step()
        if self._first:
            # Horovod's TF2 recipe: broadcast from rank 0 after the first step, once the optimizer's
            # slots exist. Done eagerly, so the compiled step is traced once.
            self.hvd.broadcast_variables(self.model.variables, root_rank=0)
            self.hvd.broadcast_variables(optimizer_variables(self.optimizer), root_rank=0)
            self._first = False

    def allgather(self, obj: Any) -> list[Any]:
        return self.hvd.allgather_object(obj)

    def environment(self) -> dict[str, Any]:
        record = super().environment()
        record["horovod"] = env.horovod_info("tensorflow")
        record["distribution"] = {"library": "horovod", "controller": "mpi" if self.hvd.mpi_enabled() else "gloo",
                                  "nccl": bool(self.hvd.nccl_built()) and bool(tf.config.get_visible_devices("GPU"))}
        return record

    def teardown(self) -> None:
        self.hvd.shutdown()
