"""tf-horovod: a compiled TensorFlow step with Horovod's DistributedGradientTape (NCCL on GPU, Gloo or MPI on CPU);
with --xla, Horovod's grouped allreduce after the XLA-compiled forward and backward pass."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.distributed import hvdist
from bench.hooks import Hooks
from bench.launching import horovod_gloo
from bench.launching.detect import LaunchInfo
from bench.measure.attribution import sparse_exchange
from bench.modes.tf_common import TFTrainer, optimizer_variables, resolve, tf

if TYPE_CHECKING:  # the run configuration imports the mode registry to check a run
    from bench.config import RunConfig



def preflight(cfg: RunConfig, launch: LaunchInfo) -> RunConfig:
    hvdist.import_hvd("tensorflow", cfg.mode)
    return resolve(cfg, launch)


def spawn(cfg: RunConfig) -> None:
    horovod_gloo.spawn(cfg.mode, cfg.np, cfg.to_json(), cfg.rendezvous_timeout)


def make_trainer(cfg: RunConfig, launch: LaunchInfo, hooks: Hooks) -> TFTrainer:
    return HorovodTFTrainer(cfg, launch, hooks)


class HorovodTFTrainer(TFTrainer):
    densifies_sparse = True  # DistributedGradientTape(sparse_as_dense=True); else IndexedSlices are allgathered
    traces_compute_step = True  # the compute-only step is a tf.function of its own: traced on its first call

    def setup(self) -> None:
        hvd = self.hvd = hvdist.import_hvd("tensorflow", self.cfg.mode)
        hvdist.init(hvd, self.rank, self.world_size, self.cfg)
        self.build_model()
        self.build_feed(*(self.make_data(self.rank) if not self.cfg.data else (None, None)))
        compression = hvd.Compression.fp16 if self.cfg.fp16_allreduce else hvd.Compression.none

        def wrap(tape):
            if self.hooks.fault == "skip-allreduce":  # bench verify's negative control
                return tape
            return hvd.DistributedGradientTape(tape, compression=compression,
                                               sparse_as_dense=self.cfg.sparse_as_dense)

        def exchange(grads):  # --xla: the tape's averaging allreduce, after the compiled pass
            if self.hooks.fault == "skip-allreduce":
                return grads
            return hvd.grouped_allreduce(grads, op=hvd.Average, compression=compression)

        @tf.function
        def train_step(x, y):
            return self.replica_step(x, y, self.cfg.batch_size, wrap_tape=wrap, exchange=exchange)

        self._train_step = train_step
        self._first = True

        @tf.function
        def compute_step(x, y):  # the same step with the plain tape: no exchange (bench.measure.attribution)
            return self.replica_step(x, y, self.cfg.batch_size)

        self._compute_step = compute_step
        self._compression = compression

    def step(self) -> None:
        self._last = self._train_step(*self.next_batch())
        self.track(self._last)
        if self._first:
            # Horovod's TF2 recipe: broadcast from rank 0 after the first step, once the optimizer's
            # slots exist. Done eagerly, so the compiled step is traced once.
            self.hvd.broadcast_variables(self.model.variables, root_rank=0)
            self.hvd.broadcast_variables(optimizer_variables(self.optimizer), root_rank=0)
            self._first = False

    def attribution_unsupported(self) -> str | None:
        return sparse_exchange(self.cfg)

    def compute_step(self) -> None:
        self._last = self._compute_step(*self._batch)

    def compiled_graphs(self) -> int | None:
        """--xla: XLA's graphs for the forward and backward pass, and the traces of this mode's step functions
        (the training step and the attribution's compute-only step, each traced on its first call)."""
        compiled = super().compiled_graphs()
        if compiled is None:
            return None
        return compiled + sum(int(f.experimental_get_tracing_count()) for f in (self._train_step, self._compute_step))

    def exchange(self) -> None:
        """The tape's exchange alone: an averaging allreduce of a tensor shaped like each gradient, grouped
        (Horovod fuses them as in a step), with the run's compression."""
        if getattr(self, "_exchange_tensors", None) is None:
            self._exchange_tensors = [tf.zeros(v.shape, v.dtype) for v in self.model.trainable_variables]
        reduced = self.hvd.grouped_allreduce(self._exchange_tensors, op=self.hvd.Average,
                                             compression=self._compression)
        self._last = reduced[-1]

    def allgather(self, obj: Any) -> list[Any]:
        return hvdist.allgather_object(self.hvd, obj)

    def environment(self) -> dict[str, Any]:
        return {**super().environment(), **hvdist.environment(
            self.hvd, "tensorflow", bool(tf.config.get_visible_devices("GPU")))}

    def teardown(self) -> None:
        self.hvd.shutdown()
