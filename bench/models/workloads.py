"""Workloads: what a model trains on and what one sample is. Each kind owns its synthetic inputs.

A workload gives, per framework, rank ``index``'s synthetic batch (seeded by the run's seed and the
index, so every mode, rank and framework that asks for shard r gets the same data), and the unit in
which throughput is counted: results say samples/s and the workload says what a sample is (an image
for the CNNs), with the symbol tables and reports print (img/s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Workload:
    kind: str  # "image", ...
    unit: str  # one sample: "image"
    units: str  # plural, for sentences: "images"
    symbol: str  # throughput's unit in tables: "img/s"

    def torch_batch(self, cfg, index: int) -> tuple[Any, Any]:
        """(inputs, targets) of data shard ``index``, as CPU tensors."""
        raise NotImplementedError

    def tf_batch(self, tf, cfg, index: int) -> tuple[Any, Any]:
        """(inputs, targets) of data shard ``index``, generated on TensorFlow's current device."""
        raise NotImplementedError

    def tokens_per_sample(self, cfg) -> int | None:
        """Tokens in one sample for text workloads (tokens/s is reported beside samples/s); None otherwise."""
        return None

    def tf_layout(self, inputs):
        """PyTorch-layout inputs (a numpy array) in TensorFlow's layout, for the cross-framework check."""
        return inputs

    def describe(self, cfg) -> str:
        """The input shape in words, for titles: '64x64'."""
        raise NotImplementedError


class ImageClassification(Workload):
    """Square RGB images of ``cfg.image_size`` (NCHW for PyTorch, NHWC for TensorFlow), labels in [0, classes)."""

    def torch_batch(self, cfg, index: int):
        import torch

        g = torch.Generator().manual_seed(cfg.seed + 1000 + index)
        data = torch.randn(cfg.batch_size, 3, cfg.image_size, cfg.image_size, generator=g)
        target = torch.randint(0, cfg.num_classes, (cfg.batch_size,), generator=g)
        return data, target

    def tf_batch(self, tf, cfg, index: int):
        seed = tf.constant([cfg.seed, 1000 + index], tf.int64)
        x = tf.random.stateless_normal([cfg.batch_size, cfg.image_size, cfg.image_size, 3], seed=seed)
        y = tf.random.stateless_uniform([cfg.batch_size], seed=seed + 1, minval=0, maxval=cfg.num_classes,
                                        dtype=tf.int32)
        return x, y

    def tf_layout(self, inputs):
        return inputs.transpose(0, 2, 3, 1)  # NCHW -> NHWC

    def describe(self, cfg) -> str:
        return f"{cfg.image_size}x{cfg.image_size}"


IMAGES = ImageClassification("image", "image", "images", "img/s")
