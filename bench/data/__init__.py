"""Data sources: datasets on disk, in the formats the studies and the field use, and the input pipelines that read
them (docs/data.md).

Formats (each written by ``bench data make`` and read by the loaders):

    imagefolder  ROOT/train/<class>/*.JPEG and ROOT/val/<class>/*.JPEG, or a flat ROOT/val/ with its label file
                 (ImageNet's layout as it ships: bench.data.datasets.VAL_LABEL_FILES)
    tfrecord     ROOT/train-NNNNN-of-NNNNN and ROOT/validation-NNNNN-of-NNNNN, tf.train.Example records with
                 image/encoded (JPEG bytes) and image/class/label (as TensorFlow's ImageNet scripts write them;
                 their labels start at 1, 0 being "background": ``label_offset`` in meta.json says so)
    cifar        ROOT/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}, the CIFAR-10 python
                 format as distributed (pickled dicts of uint8 rows of 3 x 32 x 32, channel-major)
    tokens       ROOT/train.bin and ROOT/val.bin, flat token ids (uint16 or uint32, meta.json says which)

A dataset made by ``bench data make`` carries ROOT/meta.json (format, classes, counts, how it was made); a
dataset from elsewhere is recognised by its layout (:func:`detect_format`).
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.errors import BenchError

FORMATS = ("imagefolder", "tfrecord", "cifar", "tokens")
IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")
SPLITS = {"imagefolder": ("train", "val"), "tfrecord": ("train", "validation"), "cifar": ("data_batch", "test_batch"),
          "tokens": ("train", "val")}


def meta(root: Path) -> dict:
    try:
        return json.loads((root / "meta.json").read_text())
    except (OSError, ValueError):
        return {}


def detect_format(path: str | Path) -> str:
    """The format of the dataset at ``path``, or one line saying why it is none of them."""
    root = Path(path)
    if not root.exists():
        raise BenchError(f"--data {root}: no such file or folder")
    if not root.is_dir():
        raise BenchError(f"--data {root}: not a folder (a dataset is a folder: docs/data.md)")
    known = meta(root).get("format")
    if known in FORMATS:
        return known
    if (root / "cifar-10-batches-py").is_dir() or list(root.glob("data_batch_*")):
        return "cifar"
    if list(root.glob("train-*-of-*")):
        return "tfrecord"
    if (root / "train.bin").is_file():
        return "tokens"
    if (root / "train").is_dir():
        return "imagefolder"
    if not any(root.iterdir()):
        raise BenchError(f"--data {root}: the folder is empty")
    raise BenchError(f"--data {root}: cannot tell its format (an ImageNet folder train/<class>/*.JPEG, TFRecord "
                     "shards train-*-of-*, cifar-10-batches-py/, or tokens train.bin)")
