"""``bench data make``: a dataset for trials and tests, deterministic by seed, in any of the formats
(bench.data); nothing is downloaded.

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
import json
import pickle
import shutil
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.config import option
from bench.data import FORMATS
from bench.errors import BenchError, MissingDependency
from bench.tfutil import import_tf

WIDTH, HEIGHT, QUALITY = 500, 375, 90
# The texture's share of each pixel, and its grain (pixels per random value): ~110 KB at quality 90.
DETAIL, GRAIN = 0.7, 2


@dataclass(frozen=True)
class MakeConfig:
    """bench data make's configuration: each option declared once, here (the command's flags come from it)."""
    path: str = option("", "The folder to write (it must not exist yet, or be empty).", argument=True)
    format: str = option("imagefolder", f"One of {', '.join(FORMATS)}.")
    source: str = option("synthetic", "synthetic, digits (scikit-learn's handwritten digits, real and "
                         "labelled) or text (Python's help texts as bytes, for --format tokens).", flag="--from")
    images: int = option(1000, "Samples to write (synthetic images or token sequences; digits: all 1797).")
    classes: int = option(10, "Classes (images), or the vocabulary (tokens).")
    image_size: int | None = option(None, "digits: the side they are scaled to (default 32); synthetic: both sides "
                                    "of square images instead of 500 x 375.")
    seq_len: int = option(128, "tokens: tokens per sequence.")
    val_fraction: float = option(0.2, "The share of samples in the held-out split.")
    shards: int = option(4, "tfrecord: training shards (the held-out split gets one).")
    seed: int = option(0, "Seed of every random choice.")

    def __post_init__(self) -> None:
        if not self.path:
            raise BenchError("bench data make needs the folder to write: bench data make PATH")
        if self.format not in FORMATS:
            raise BenchError(f"--format takes {', '.join(FORMATS)} (got '{self.format}')")
        if self.source not in ("synthetic", "digits", "text"):
            raise BenchError(f"--from takes synthetic, digits or text (got '{self.source}')")
        if self.source == "digits" and self.format == "tokens":
            raise BenchError("--from digits makes images: choose --format imagefolder, tfrecord or cifar")
        if self.source == "text" and self.format != "tokens":
            raise BenchError("--from text makes token ids: --format tokens")
        if self.format == "cifar" and self.source == "synthetic" and self.image_size not in (None, 32):
            raise BenchError("the CIFAR-10 format holds 32 x 32 images: leave out --image-size")
        for name in ("images", "classes", "seq_len", "shards"):
            if getattr(self, name) < 1:
                raise BenchError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        if self.format != "tokens" and self.classes > 1000:
            raise BenchError(f"--classes must be <= 1000 for images (got {self.classes})")
        if not 0 < self.val_fraction < 1:
            raise BenchError(f"--val-fraction must be between 0 and 1 (got {self.val_fraction})")


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

    def __init__(self, cfg: MakeConfig) -> None:
        self.cfg = cfg
        if cfg.source == "digits":
            self.held, self.labels = digits(cfg.image_size or 32, cfg.seed)
        else:
            self.held = None
            self.labels = np.random.default_rng(cfg.seed).integers(0, cfg.classes, cfg.images)
        if cfg.format == "cifar":
            self.side = (32, 32)
        else:
            self.side = (cfg.image_size, cfg.image_size) if cfg.image_size else (WIDTH, HEIGHT)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> np.ndarray:
        if self.held is not None:
            return self.held[i]
        return synthetic_image(np.random.default_rng([self.cfg.seed, i]), *self.side)


def split(n: int, val_fraction: float) -> int:
    """How many of n samples go to the held-out split (at least one, and at least one left to train on)."""
    return min(n - 1, max(1, round(n * val_fraction)))


def held_out(labels: np.ndarray, n_val: int) -> list[int]:
    """The held-out samples of an ImageNet folder: the first ``n_val`` in order, but for the last sample of a
    class, which stays in train/ (a class folder only val/ had would be refused when read: its label would mean
    nothing); fewer where the classes leave no more to hold out."""
    left = Counter(labels.tolist())
    val = []
    for i, c in enumerate(labels.tolist()):
        if len(val) == n_val:
            break
        if left[c] > 1:
            val.append(i)
            left[c] -= 1
    return val


def write_imagefolder(root: Path, images, labels: np.ndarray, cfg: MakeConfig) -> dict[str, int]:
    val = held_out(labels, split(len(labels), cfg.val_fraction))
    kept = set(val)
    counts = {}
    for name, part in (("train", [i for i in range(len(labels)) if i not in kept]), ("val", val)):
        for i in part:
            folder = root / name / f"n{int(labels[i]):08d}"  # ImageNet's synset-style class folders
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{name}_{i:08d}.JPEG").write_bytes(jpeg(images[i]))
        counts[name] = len(part)
    return counts


def write_cifar(root: Path, images, labels: np.ndarray, cfg: MakeConfig) -> dict[str, int]:
    """The CIFAR-10 python format: five training batches and a test batch, rows of 3072 uint8 (red, green, blue
    planes of 32 x 32), labels as a list; batches.meta names the classes."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rows = np.stack([images[i][:32, :32].transpose(2, 0, 1).reshape(-1) for i in range(len(images))])
    if rows.shape[1] != 3072:
        raise BenchError("the CIFAR-10 format holds 32 x 32 images: use --image-size 32")
    n_val = split(len(labels), cfg.val_fraction)
    train = np.arange(n_val, len(labels))
    for b, part in enumerate(np.array_split(train, 5), start=1):
        with open(folder / f"data_batch_{b}", "wb") as f:
            pickle.dump({b"batch_label": f"training batch {b} of 5".encode(), b"labels": labels[part].tolist(),
                         b"data": rows[part], b"filenames": [f"{i}.png".encode() for i in part]}, f)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({b"batch_label": b"testing batch 1 of 1", b"labels": labels[:n_val].tolist(),
                     b"data": rows[:n_val], b"filenames": [f"{i}.png".encode() for i in range(n_val)]}, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [f"class{c}".encode() for c in range(cfg.classes)], b"num_cases_per_batch":
                     len(train) // 5, b"num_vis": 3072}, f)
    return {"train": len(train), "val": n_val}


def write_tfrecord(root: Path, images, labels: np.ndarray, cfg: MakeConfig) -> dict[str, int]:
    """TFRecord shards as TensorFlow's ImageNet scripts write them (image/encoded, image/class/label from 1)."""
    tf, _ = import_tf()
    n_val = split(len(labels), cfg.val_fraction)
    parts = {"train": np.arange(n_val, len(labels)), "validation": np.arange(n_val)}
    for name, index in parts.items():
        shards = np.array_split(index, cfg.shards if name == "train" else 1)
        for s, part in enumerate(shards):
            with tf.io.TFRecordWriter(str(root / f"{name}-{s:05d}-of-{len(shards):05d}")) as writer:
                for i in part:
                    feature = {
                        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg(images[i])])),
                        "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"JPEG"])),
                        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(
                            value=[int(labels[i]) + 1])),
                    }
                    writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return {"train": len(parts["train"]), "val": n_val}


TEXT_VOCABULARY = 256  # --from text: one token per byte


def text_bytes() -> bytes:
    """--from text's source: every help topic of pydoc_data.topics, in the order of their names."""
    from pydoc_data.topics import topics

    return "".join(topics[name] for name in sorted(topics)).encode()


def write_tokens(root: Path, cfg: MakeConfig) -> dict[str, int]:
    if cfg.source == "text":
        ids = np.frombuffer(text_bytes(), np.uint8)[:cfg.images * cfg.seq_len].astype(np.uint16)
        n_val = split(len(ids), cfg.val_fraction)
        parts = {"train": ids[:len(ids) - n_val], "val": ids[len(ids) - n_val:]}
    else:
        dtype = np.uint16 if cfg.classes <= 65536 else np.uint32
        rng = np.random.default_rng(cfg.seed)
        n_val = split(cfg.images, cfg.val_fraction)
        parts = {name: rng.integers(0, cfg.classes, n * cfg.seq_len, dtype=np.int64).astype(dtype)
                 for name, n in (("train", cfg.images - n_val), ("val", n_val))}
    for name, ids in parts.items():
        ids.tofile(root / f"{name}.bin")
    return {name: len(ids) for name, ids in parts.items()}


def make(cfg: MakeConfig) -> dict[str, Any]:
    """Write the dataset whole into a new folder (a temporary sibling, renamed when done: a dataset half written
    is never left under PATH); its meta.json record."""
    root = Path(cfg.path)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise BenchError(f"{root} exists and is not an empty folder; not overwritten")
    work = root.with_name(f".{root.name}.making")
    shutil.rmtree(work, ignore_errors=True)
    try:
        work.mkdir(parents=True)
        if cfg.format == "tokens":
            counts = write_tokens(work, cfg)
        else:
            images = Images(cfg)
            writer = {"imagefolder": write_imagefolder, "cifar": write_cifar, "tfrecord": write_tfrecord}[cfg.format]
            counts = writer(work, images, images.labels, cfg)
        classes = {"digits": 10, "text": TEXT_VOCABULARY}.get(cfg.source, cfg.classes)
        record = {"format": cfg.format, "source": cfg.source, "classes": classes, "counts": counts,
                  "label_offset": 1 if cfg.format == "tfrecord" else 0,
                  "token_dtype": ("uint16" if classes <= 65536 else "uint32") if cfg.format == "tokens" else None,
                  "made_with": asdict(cfg)}
        (work / "meta.json").write_text(json.dumps(record, indent=2) + "\n")
        if root.exists():
            root.rmdir()
        work.rename(root)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return record


def main(cfg: MakeConfig) -> None:
    record = make(cfg)
    size = sum(p.stat().st_size for p in Path(cfg.path).rglob("*") if p.is_file())
    counts = ", ".join(f"{v} {k}" for k, v in record["counts"].items())
    unit = "tokens" if cfg.format == "tokens" else "images"
    print(f"data: {cfg.path}: {cfg.format} from {cfg.source}, {counts} {unit}, {record['classes']} classes, "
          f"{size / 1e6:.1f} MB", file=sys.stdout)
