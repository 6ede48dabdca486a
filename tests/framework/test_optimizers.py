"""--optimizer: each framework's optimizer as its modes build it takes the same steps from the same gradients."""

from types import SimpleNamespace

import numpy as np
import pytest


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("name", ["sgd", "adagrad"])
def test_both_frameworks_optimizers_take_the_same_steps(name, fused):
    """(--fused-optimizer: torch's fused kernel takes the same steps as its plain one, and so as Keras'.)"""
    import torch

    from bench.modes.tf_common import optimizer
    from bench.modes.torch_common import TorchTrainer
    from bench.tfutil import import_tf

    tf, keras = import_tf()
    cfg = SimpleNamespace(optimizer=name, learning_rate=0.05, momentum=0.9, weight_decay=None, fused_optimizer=fused)
    rng = np.random.default_rng(0)
    start = rng.normal(size=(4, 3)).astype(np.float32)
    grads = [rng.normal(size=(4, 3)).astype(np.float32) * scale for scale in (1.0, 0.1, 3.0, 0.0)]
    weight = torch.nn.Parameter(torch.from_numpy(start.copy()))
    opt = TorchTrainer.build_optimizer(SimpleNamespace(cfg=cfg), [weight])
    assert bool(opt.defaults.get("fused")) is fused
    variable = tf.Variable(start.copy())
    tf_opt = optimizer(keras, cfg)
    for g in grads:
        weight.grad = torch.from_numpy(g.copy())
        opt.step()
        tf_opt.apply_gradients([(tf.constant(g), variable)])
    moved = weight.detach().numpy()
    assert np.abs(moved - start).max() > 0.01  # the steps moved the weights
    np.testing.assert_allclose(moved, variable.numpy(), rtol=1e-5, atol=1e-6)
