"""tf-single: a plain single-device TensorFlow loop (compiled step), no strategy, no Horovod."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.hooks import Hooks
from bench.launching.detect import LaunchInfo
from bench.modes import single
from bench.modes.tf_common import TFTrainer, resolve, tf

if TYPE_CHECKING:  # the run configuration imports the mode registry to check a run
    from bench.config import RunConfig



def preflight(cfg: RunConfig, launch: LaunchInfo) -> RunConfig:
    return single.preflight(cfg, launch, resolve)


def spawn(cfg: RunConfig) -> None:
    single.spawn_one(cfg)


def make_trainer(cfg: RunConfig, launch: LaunchInfo, hooks: Hooks) -> TFTrainer:
    return SingleTFTrainer(cfg, launch, hooks)


class SingleTFTrainer(TFTrainer):
    def setup(self) -> None:
        self.build_model()
        # bench verify's reference trains on the global batch of data_shards ranks in one step.
        shards = self.hooks.data_shards or 1
        self.build_feed(*(self.make_global_data(shards) if not self.cfg.data else (None, None)))

        @tf.function
        def train_step(x, y):
            return self.replica_step(x, y, self.cfg.batch_size * shards)

        self._train_step = train_step

    def step(self) -> None:
        self._last = self._train_step(*self.next_batch())
        self.track(self._last)

    def allgather(self, obj: Any) -> list[Any]:
        return [obj]

    def environment(self) -> dict[str, Any]:
        record = super().environment()
        record["distribution"] = {"library": None}
        return record
