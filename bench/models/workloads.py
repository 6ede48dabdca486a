"""Workloads: what a model trains on and what one sample is. Each kind owns its synthetic inputs.

A workload gives, per framework, rank ``index``'s synthetic batch (seeded by the run's seed and the
index, so every mode, rank and framework that asks for shard r gets the same data), and the unit in
which throughput is counted: results say samples/s and the workload says what a sample is (an image
for the CNNs), with the symbol tables and reports print (img/s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.errors import BenchError


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

    def resolve(self, spec, cfg, profile) -> dict[str, Any]:
        """The input fields of a resolved config (the others None): defaults from the profile and the model."""
        raise NotImplementedError

    def check(self, spec, cfg) -> None:
        """One clear error for an input field this workload has no use for, or out of range."""
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

    def resolve(self, spec, cfg, profile):
        size = cfg.image_size or profile.image_size or spec.default_image_size
        return {"image_size": max(size, spec.min_image_size), "seq_len": None}

    def check(self, spec, cfg):
        if cfg.seq_len is not None:
            raise BenchError(f"--seq-len applies to text models; {spec.name} trains on images")
        if cfg.image_size is not None and cfg.image_size < spec.min_image_size:
            raise BenchError(f"--image-size for {spec.name} must be >= {spec.min_image_size} (got {cfg.image_size})")

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


class TokenSequences(Workload):
    """Sequence-to-sequence token batches, (B, 2, L) ids: the source sequence, then the target sequence the
    decoder reads (teacher forcing); the targets are the next tokens, (B, L). Uniform random ids in
    [0, vocabulary): synthetic, like the images. One sample is one sequence pair; its tokens are the L
    target tokens the loss is taken over (how translation throughput is usually counted)."""

    def resolve(self, spec, cfg, profile):
        return {"image_size": None, "seq_len": cfg.seq_len or profile.seq_len or spec.default_seq_len}

    def check(self, spec, cfg):
        if cfg.image_size is not None:
            raise BenchError(f"--image-size applies to image models; {spec.name} trains on token sequences "
                             "(--seq-len)")

    def torch_batch(self, cfg, index: int):
        import torch

        g = torch.Generator().manual_seed(cfg.seed + 1000 + index)
        tokens = torch.randint(0, cfg.num_classes, (cfg.batch_size, 3, cfg.seq_len), generator=g)
        return tokens[:, :2].contiguous(), tokens[:, 2].contiguous()

    def tf_batch(self, tf, cfg, index: int):
        seed = tf.constant([cfg.seed, 1000 + index], tf.int64)
        tokens = tf.random.stateless_uniform([cfg.batch_size, 3, cfg.seq_len], seed=seed, minval=0,
                                             maxval=cfg.num_classes, dtype=tf.int32)
        return tokens[:, :2], tokens[:, 2]

    def tokens_per_sample(self, cfg) -> int | None:
        return cfg.seq_len

    def describe(self, cfg) -> str:
        embedding = ""
        if getattr(cfg, "sparse_embeddings", False):
            embedding = ", sparse-as-dense" if getattr(cfg, "sparse_as_dense", False) else ", sparse"
        return f"seq {cfg.seq_len}, vocab {cfg.num_classes}{embedding}"


SEQUENCES = TokenSequences("text", "sequence", "sequences", "seq/s")
