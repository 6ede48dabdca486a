"""A throwaway mode and model, registered from outside bench (HVDBENCH_PLUGINS=toy_plugin): the registries'
test that a new mode or model needs no edit anywhere else (tests/multiproc/test_registry.py).

* ``toy-mlp``: global average pool over the image, a 16-unit hidden layer, the classifier; both frameworks.
* ``torch-toy``: a distributed PyTorch mode, DistributedDataParallel under another name.
* ``--toy-lr-scale``: a run option (every mode command and bench sweep take it; torch-toy multiplies its
  learning rate by it), declared here alone.
"""

from __future__ import annotations

import dataclasses

from bench.config import register_option
from bench.hooks import Hooks
from bench.launching.supervise import spawn_local
from bench.models import ModelSpec
from bench.models import register as register_model
from bench.modes import ModeSpec
from bench.modes import register as register_mode

HIDDEN = 16

register_model(ModelSpec("toy-mlp", "throwaway: mean colour -> 16 -> classes", 8, 8,
                         params_1000=3 * HIDDEN + HIDDEN + HIDDEN * 1000 + 1000, head_inputs=(HIDDEN,),
                         torch="toy_plugin:torch_mlp", tf="toy_plugin:tf_mlp"))
register_mode(ModeSpec("torch-toy", "torch", "toy_plugin", "throwaway: DDP under another name",
                       library="native", reference="torch-single", allreduce={None: "torch"}))
register_option("toy_lr_scale", int, 1, "Throwaway: torch-toy multiplies its learning rate by this.", minimum=1,
                sweep=True)


def torch_mlp(num_classes: int):
    from torch import nn

    class MeanColour(nn.Module):
        def forward(self, x):
            return x.mean(dim=(2, 3))

    return nn.Sequential(MeanColour(), nn.Linear(3, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, num_classes))


def tf_mlp(num_classes: int, image_size: int):
    from bench.tfutil import import_tf

    _, keras = import_tf()
    inputs = keras.Input((image_size, image_size, 3))
    x = keras.layers.GlobalAveragePooling2D()(inputs)
    x = keras.layers.Dense(HIDDEN, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes, dtype="float32")(x))


# -- the mode's three functions (bench.modes) --------------------------------------------------------
def preflight(cfg, launch):
    from bench.modes.torch_common import resolve

    return resolve(cfg, launch)


def spawn(cfg) -> None:
    spawn_local([cfg.mode], cfg.np, cfg.to_json())


def make_trainer(cfg, launch, hooks: Hooks):
    from bench.modes.torch_ddp import DDPTrainer

    scaled = dataclasses.replace(cfg, learning_rate=cfg.learning_rate * cfg.extra.get("toy_lr_scale", 1))
    return DDPTrainer(scaled, launch, hooks)
