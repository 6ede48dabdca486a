"""Mode registry: a mode is one module that knows its framework's setup and step; nothing else.

Each mode module provides:
  ``preflight(cfg, launch) -> RunConfig``  checks and resolves the config (runs in the parent too)
  ``spawn(cfg) -> None``                   starts the ranks when no launcher is around
  ``make_trainer(cfg, launch) -> Trainer`` the per-rank object bench.runner.measure drives
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class ModeSpec:
    name: str
    framework: str
    module: str
    description: str

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


MODES: dict[str, ModeSpec] = {
    spec.name: spec
    for spec in (
        ModeSpec("torch-ddp", "torch", "bench.modes.torch_ddp",
                 "PyTorch DistributedDataParallel (NCCL on GPU, Gloo on CPU)"),
        ModeSpec("torch-horovod", "torch", "bench.modes.torch_horovod",
                 "PyTorch with Horovod allreduce (NCCL on GPU, Gloo or MPI on CPU)"),
        ModeSpec("tf-horovod", "tensorflow", "bench.modes.tf_horovod",
                 "TensorFlow with Horovod's DistributedGradientTape (NCCL on GPU, Gloo or MPI on CPU)"),
        ModeSpec("tf-native", "tensorflow", "bench.modes.tf_native",
                 "TensorFlow tf.distribute: --strategy multiworker (default), mirrored or ps"),
        ModeSpec("torch-single", "torch", "bench.modes.torch_single",
                 "PyTorch on one device, no distribution library: the single-GPU baseline"),
        ModeSpec("tf-single", "tensorflow", "bench.modes.tf_single",
                 "TensorFlow on one device (compiled step), no strategy, no Horovod: the baseline"),
    )
}
