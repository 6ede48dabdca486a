"""torch-single: a plain single-device PyTorch loop, no distribution library (the baseline seed 000 starts from)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.hooks import Hooks
from bench.launching.detect import LaunchInfo
from bench.modes import single
from bench.modes.torch_common import TorchTrainer, resolve, torch
from bench.vocabulary import Precision

if TYPE_CHECKING:  # the run configuration imports the mode registry to check a run
    from bench.config import RunConfig



def preflight(cfg: RunConfig, launch: LaunchInfo) -> RunConfig:
    return single.preflight(cfg, launch, resolve)


def spawn(cfg: RunConfig) -> None:
    single.spawn_one(cfg)


def make_trainer(cfg: RunConfig, launch: LaunchInfo, hooks: Hooks) -> TorchTrainer:
    return SingleTrainer(cfg, launch, hooks)


class SingleTrainer(TorchTrainer):
    def setup(self) -> None:
        self.model = self.compile(self.build_model())
        self.optimizer = self.build_optimizer(self.model.parameters())
        if self.cfg.precision == Precision.amp_fp16:
            self.scaler = torch.amp.GradScaler("cuda")
        # bench verify's reference: the global batch of data_shards ranks in one step.
        self.build_data(list(range(self.hooks.data_shards)) if self.hooks.data_shards else None)

    def allgather(self, obj: Any) -> list[Any]:
        return [obj]

    def environment(self) -> dict[str, Any]:
        record = super().environment()
        record["distribution"] = {"library": None}
        return record
