"""Where `bench data make`'s samples come from (bench.data.make; the formats write them: bench.data.formats).

Synthetic images (the default) stand in for ImageNet's files, so that an input pipeline does ImageNet's work per
image: 500 x 375 pixels (ImageNet's most common size; its train images average about 400 x 350), JPEG quality 90,
about 110 KB each (ImageNet's train set: 138 GB in 1.28 M files, 108 KB a file). Each is a smooth colour field
(a scene's large shapes) mixed with band-limited texture (its detail), tuned to that size at quality 90; the
content carries no label (for throughput, not for learning).

``--from digits``: the real handwritten digits scikit-learn ships in its wheel (UCI's Optical Recognition of
Handwritten Digits: 1797 labelled 8 x 8 images, 10 classes), scaled up (``--image-size``, default 32) to RGB,
split 80/20 into train and val by the seed: a small real labelled dataset a model can learn (bench converge).
Text: token ids drawn uniformly from the vocabulary (``--classes``), uint16 up to 65536 tokens, else uint32
(throughput only: nothing to learn). ``--from text``: real text a model can learn, shipped with every Python:
the help texts of ``pydoc_data.topics`` (the language reference's topics, about 0.47 MB of English and code),
as UTF-8 bytes, one token per byte (vocabulary 256); the first ``--images`` x ``--seq-len`` bytes (all where
that is more), the last ``--val-fraction`` of them held out as one piece (text the model never read).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from bench.errors import MissingDependency

WIDTH, HEIGHT, QUALITY = 500, 375, 90
# The texture's share of each pixel, and its grain (pixels per random value): ~110 KB at quality 90.
DETAIL, GRAIN = 0.7, 2


def synthetic_image(rng: np.random.Generator, width: int = WIDTH, height: int = HEIGHT) -> np.ndarray:
    """One HEIGHT x WIDTH x 3 uint8 image: a smooth colour field mixed with band-limited texture."""
    from PIL import Image

    base = rng.random((height // 25 + 2, width // 25 + 2, 3))
    base = np.asarray(Image.fromarray((base * 255).astype(np.uint8)).resize((width, height), Image.BICUBIC),
                      dtype=np.float32)
    texture = rng.random((height // GRAIN + 1, width // GRAIN + 1, 3))
    texture = np.asarray(Image.fromarray((texture * 255).astype(np.uint8)).resize((width, height), Image.BILINEAR),
                         dtype=np.float32)
    return np.clip((1 - DETAIL) * base + DETAIL * texture, 0, 255).astype(np.uint8)


def jpeg(pixels: np.ndarray) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=QUALITY)
    return out.getvalue()


def digits(size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as N x size x size x 3 uint8 (ink dark on white, as scanned), and their labels,
    in an order shuffled by ``seed``."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise MissingDependency("--from digits needs scikit-learn (its wheel ships the digits): pip install "
                                "scikit-learn") from None
    from PIL import Image

    d = load_digits()
    order = np.random.default_rng(seed).permutation(len(d.target))
    images = []
    for i in order:
        gray = (255 - d.images[i] * (255 / 16)).astype(np.uint8)  # 0..16 ink -> white paper, dark ink
        big = Image.fromarray(gray).resize((size, size), Image.BICUBIC).convert("RGB")
        images.append(np.asarray(big))
    return np.stack(images), d.target[order].astype(np.int64)


class Images:
    """The dataset's images by index, made when asked (a thousand 500 x 375 images would fill half a GB held at
    once): synthetic image i comes from its own generator seeded by (seed, i), so any subset is the same."""

    def __init__(self, cfg: Any, side: int | None = None, label_offset: int = 0) -> None:
        """``cfg``: bench.data.make.MakeConfig; ``side``: the format's one image side, if it has one;
        ``label_offset``: the label its first class has on disk (``labels`` count from 0)."""
        self.cfg, self.label_offset = cfg, label_offset
        if cfg.source == "digits":
            self.held, self.labels = digits(cfg.image_size or 32, cfg.seed)
        else:
            self.held = None
            self.labels = np.random.default_rng(cfg.seed).integers(0, cfg.classes, cfg.images)
        side = side or cfg.image_size
        self.side = (side, side) if side else (WIDTH, HEIGHT)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> np.ndarray:
        if self.held is not None:
            return self.held[i]
        return synthetic_image(np.random.default_rng([self.cfg.seed, i]), *self.side)


def held_out_count(n: int, val_fraction: float) -> int:
    """How many of n samples go to the held-out split (at least one, and at least one left to train on)."""
    return min(n - 1, max(1, round(n * val_fraction)))


TEXT_VOCABULARY = 256  # --from text: one token per byte


def text_bytes() -> bytes:
    """--from text's source: every help topic of pydoc_data.topics, in the order of their names."""
    from pydoc_data.topics import topics

    return "".join(topics[name] for name in sorted(topics)).encode()
