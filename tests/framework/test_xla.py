"""--xla (the tuned profile's compiler for TensorFlow on a GPU): the same training as the uncompiled step."""

import dataclasses

import numpy as np
import pytest

from bench.config import RunConfig
from bench.launching.detect import LaunchInfo

tf_single = pytest.importorskip("bench.modes.tf_single")


def losses(cfg: RunConfig, steps: int) -> tuple[list[float], object]:
    """Each step's training loss (of the weights before its update) and the trainer."""
    trainer = tf_single.make_trainer(cfg, LaunchInfo("none"), None)
    trainer.setup()
    out = []
    for _ in range(steps):
        trainer.step()
        out.append(float(trainer._last.numpy()))
    return out, trainer


def test_an_xla_run_takes_the_uncompiled_runs_steps():
    base = RunConfig(mode="tf-single", model="resnet20", batch_size=4, image_size=32, num_classes=10)
    plain_cfg = base.resolve("cpu", 1)
    assert plain_cfg.xla is False and not plain_cfg.compiles
    xla_cfg = dataclasses.replace(base, xla=True).resolve("cpu", 1)
    assert xla_cfg.xla and xla_cfg.compiles
    plain, plain_trainer = losses(plain_cfg, 5)
    compiled, trainer = losses(xla_cfg, 5)
    assert plain_trainer.compiled_graphs() is None
    # the optimizer's slots exist before the first step, so the step is traced once, not twice (bench.modes.tf_common)
    assert [t._train_step.experimental_get_tracing_count() for t in (plain_trainer, trainer)] == [1, 1]
    assert trainer.compiled_graphs() == 1  # the forward and backward pass went through XLA, traced once
    assert len(set(plain)) == 5  # the steps moved the weights: the comparison below can fail
    # the same steps from the same weights; XLA fuses and sums in another order (fp32 rounding)
    assert compiled == pytest.approx(plain, rel=2e-3)
    weights = [np.asarray(v) for v in trainer.model.trainable_variables]
    reference = [np.asarray(v) for v in plain_trainer.model.trainable_variables]
    # after five updates the weights (|w| up to about 0.5) agree to rounding that batch-4 normalisation amplifies
    assert all(np.allclose(a, b, rtol=0, atol=1e-3) for a, b in zip(weights, reference, strict=True))
