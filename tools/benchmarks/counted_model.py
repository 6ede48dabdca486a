"""A plugin model that counts what it trains on (HVDBENCH_PLUGINS=counted_model, this folder on PYTHONPATH):
``counted-resnet20`` is bench's ResNet-20 whose every training-mode forward adds its batch's samples to a file per
rank (COUNTED_DIR/rank-R: every sample it saw, the first batch's, and the wall times of the first and last
forward; the first is the run's first step, inside init_s). tools/benchmarks/wall_count.py
holds a run's wall-clock figures against it: a count taken from the batches the model saw, not from the step
counts the result's formula multiplies.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from bench.models import MODELS
from bench.models import register as register_model

NAME = "counted-resnet20"
DIR_ENV = "COUNTED_DIR"

register_model(dataclasses.replace(MODELS["resnet20"], name=NAME, description="ResNet-20 counting its samples",
                                   torch="counted_model:torch_counted"))


def torch_counted(num_classes: int):
    from torch import nn

    inner = MODELS["resnet20"].build_torch(num_classes)
    path = Path(os.environ[DIR_ENV]) / f"rank-{os.environ.get('RANK', '0')}"

    class Counted(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner
            self.samples, self.first_batch, self.first = 0, None, None

        def forward(self, x):
            if self.training:
                now, n = time.time(), int(x.shape[0])
                if self.first is None:
                    self.first, self.first_batch = now, n
                self.samples += n
                path.write_text(f"{self.samples} {self.first_batch} {self.first} {now}\n")
            return self.inner(x)

    return Counted()

