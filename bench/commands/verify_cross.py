"""bench verify across frameworks: the PyTorch model and its TensorFlow twin, from the same initial weights.

The PyTorch model is built with the run's seed; its parameters are loaded into the TensorFlow twin
(layer by layer, in definition order), both train single-process on the CPU with the same SGD on the
same global batch for the same steps, and the per-step losses (computed before each update) are compared.
Weight layouts::

    conv    PyTorch (out, in, kh, kw)      -> TensorFlow (kh, kw, in, out)       transpose(2, 3, 1, 0)
    dense   PyTorch (out, in)              -> TensorFlow (in, out)               transpose
    VGG's first dense reads the flattened feature map: PyTorch flattens (C, H, W), TensorFlow (H, W, C),
            so its input rows are re-ordered: reshape(out, C, H, W).transpose(2, 3, 1, 0).reshape(H*W*C, out)

SGD with momentum is the same update in both (PyTorch: b = mu*b + g, w -= lr*b; Keras: v = mu*v - lr*g,
w += v; so v = -lr*b at every step).
"""

from __future__ import annotations

import os

import numpy as np

from bench.commands.snapshots import differences
from bench.config import LEARNING_RATE, MOMENTUM, RunConfig
from bench.errors import BenchError
from bench.models import model as model_spec
from bench.modes import single_of
from bench.records.kinds import CrossCheck
from bench.tfutil import import_tf

CROSS_TOLERANCE = 1e-3  # relative loss difference per step, PyTorch vs TensorFlow


def torch_to_tf(arrays: list[np.ndarray], names: list[str] | None = None) -> list[np.ndarray]:
    """PyTorch parameter arrays (definition order) -> the TensorFlow twin's trainable variables. Embedding
    tables (names ending in embedding.weight) have one layout in both: (vocabulary, width)."""
    out = []
    previous_ndim = None
    for i, a in enumerate(arrays):
        if names is not None and names[i].endswith("embedding.weight"):
            out.append(a)
            continue
        if a.ndim == 4:
            out.append(a.transpose(2, 3, 1, 0))
        elif a.ndim == 2:
            if previous_ndim == 4:  # first dense after the conv stack: (C, H, W) -> (H, W, C) inputs
                channels = next(x for x in reversed(out) if x.ndim == 4).shape[3]
                side = int(round((a.shape[1] / channels) ** 0.5))
                if channels * side * side != a.shape[1]:
                    raise BenchError(f"cannot map a dense layer with {a.shape[1]} inputs after {channels} channels")
                out.append(a.reshape(a.shape[0], channels, side, side).transpose(2, 3, 1, 0)
                           .reshape(side * side * channels, a.shape[0]))
            else:
                out.append(a.T)
        elif a.ndim == 1:
            out.append(a)
        else:
            raise BenchError(f"no TensorFlow layout for a parameter of shape {a.shape}")
        if a.ndim != 1:
            previous_ndim = a.ndim
    return out


def cross_framework(vc) -> CrossCheck:
    """Train both twins from the same weights on the same global batch; compare the loss trajectories."""
    import torch

    from bench.models.torch_loss import loss_fn

    threads = int(os.environ.get("OMP_NUM_THREADS", 0)) or (os.cpu_count() or 1)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    cfg = RunConfig(mode=single_of("torch").name, model=vc.model, batch_size=vc.batch_size, image_size=vc.image_size,
                    seq_len=vc.seq_len, num_classes=vc.num_classes, seed=vc.seed).resolve("cpu", 1)
    spec = model_spec(vc.model)
    parts = [spec.workload.torch_batch(cfg, i) for i in range(vc.np)]
    data, target = torch.cat([d for d, _ in parts]), torch.cat([t for _, t in parts])

    torch.manual_seed(vc.seed)
    embedding = "sparse" if vc.sparse_embeddings else "tied"
    model = spec.build_torch(vc.num_classes, embedding)
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    model.train()
    names = [n for n, _ in model.named_parameters()]
    initial = [p.detach().numpy().copy() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    torch_losses = []
    for _ in range(vc.steps):
        opt.zero_grad()
        loss = loss_fn(model(data), target)
        loss.backward()
        opt.step()
        torch_losses.append(float(loss.detach()))
    torch_final = [p.detach().numpy().copy() for p in model.parameters()]

    initial_tf = torch_to_tf(initial, names)
    tf_losses, tf_final = _train_tf(vc, initial_tf, spec.workload.tf_layout(data.numpy()), target.numpy(), embedding)
    t, f = np.array(torch_losses, np.float64), np.array(tf_losses, np.float64)
    abs_diff = np.abs(t - f)
    rel = float(np.max(abs_diff / np.abs(t)))
    weights = differences(initial_tf, torch_to_tf(torch_final, names), tf_final)
    ok = rel <= CROSS_TOLERANCE
    return CrossCheck(
        status="PASS" if ok else "FAIL",
        reason=None if ok else f"losses differ by {rel:.2e} relative > tolerance {CROSS_TOLERANCE:.0e}",
        steps=vc.steps, global_batch=vc.batch_size * vc.np, loss_torch=torch_losses, loss_tf=tf_losses,
        max_abs_loss=float(np.max(abs_diff)), max_rel_loss=rel, tolerance=CROSS_TOLERANCE, final_weights=weights,
        definition="per step, the loss before the update; max_rel_loss = max |l_tf - l_torch| / |l_torch|",
    )


def _train_tf(vc, weights: list[np.ndarray], x: np.ndarray, y: np.ndarray,
              embedding: str = "tied") -> tuple[list[float], list[np.ndarray]]:
    from bench.models.tf_loss import per_example_loss

    tf, keras = import_tf()
    tf.config.experimental.enable_op_determinism()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    with tf.device("/cpu:0"):  # a correctness check: both frameworks on the CPU
        model = model_spec(vc.model).build_tf(vc.num_classes, vc.image_size, embedding)
        for layer in model.submodules:
            if isinstance(layer, keras.layers.Dropout):
                layer.rate = 0.0
        variables = model.trainable_variables
        if len(variables) != len(weights) or any(tuple(v.shape) != w.shape for v, w in zip(variables, weights,
                                                                                           strict=True)):
            raise BenchError("the TensorFlow twin's variables do not match the PyTorch parameters")
        for v, w in zip(variables, weights, strict=True):
            v.assign(w)
        opt = keras.optimizers.SGD(learning_rate=LEARNING_RATE, momentum=MOMENTUM)
        xs, ys = tf.constant(x), tf.constant(y.astype(np.int32))

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(per_example_loss(model(xs, training=True), ys))
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
            return loss

        losses = [float(step()) for _ in range(vc.steps)]
        return losses, [np.asarray(v.numpy(), np.float32) for v in variables]
