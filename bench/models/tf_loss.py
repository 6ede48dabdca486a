"""The loss every TensorFlow mode trains with, and the trainable-parameter count the tests hold the models to."""

from __future__ import annotations

import math

from bench.tfutil import import_tf

tf, keras = import_tf()
layers = keras.layers


def per_example_loss(outputs, labels, smoothing: float = 0.0):
    """Cross-entropy per example (``smoothing``: label smoothing, (1 - e) x CE + e x the mean over classes of
    -log p, as PyTorch's); Inception V3: main + 0.4 x auxiliary (as the PyTorch twin)."""
    sparse = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)

    def ce(y, logits):
        if not smoothing:
            return sparse(y, logits)
        logp = tf.nn.log_softmax(tf.cast(logits, tf.float32))
        return (1 - smoothing) * sparse(y, logits) - smoothing * tf.reduce_mean(logp, axis=-1)

    if isinstance(outputs, (list, tuple)):
        return ce(labels, outputs[0]) + 0.4 * ce(labels, outputs[1])
    if len(outputs.shape) == 3:  # per-token logits: an example's loss is the mean over its tokens
        return tf.reduce_mean(ce(labels, outputs), axis=-1)
    return ce(labels, outputs)


def count_trainable(model) -> int:
    return int(sum(math.prod(v.shape) for v in model.trainable_variables))
