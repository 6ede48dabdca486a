"""Data sources: datasets on disk, in the formats the studies and the field use, and the input pipelines that read
them (docs/data.md).

Formats (bench.data.formats: one module each, registered by name; each written by ``bench data make`` and read by
the loaders its spec names):

    imagefolder  ROOT/train/<class>/*.JPEG and ROOT/val/<class>/*.JPEG, or a flat ROOT/val/ with its label file
                 (ImageNet's layout as it ships: bench.data.formats.imagefolder.VAL_LABEL_FILES)
    tfrecord     ROOT/train-NNNNN-of-NNNNN and ROOT/validation-NNNNN-of-NNNNN, tf.train.Example records with
                 image/encoded (JPEG bytes) and image/class/label (as TensorFlow's ImageNet scripts write them;
                 their labels start at 1, 0 being "background": ``label_offset`` in meta.json says so)
    cifar        ROOT/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}, the CIFAR-10 python
                 format as distributed (pickled dicts of uint8 rows of 3 x 32 x 32, channel-major)
    tokens       ROOT/train.bin and ROOT/val.bin, flat token ids (uint16 or uint32, meta.json says which)

A dataset made by ``bench data make`` carries ROOT/meta.json (format, classes, counts, how it was made); a
dataset from elsewhere is recognised by its layout (bench.data.formats.detect).
"""

from __future__ import annotations

import json
from pathlib import Path

IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")


def meta(root: Path) -> dict:
    try:
        return json.loads((root / "meta.json").read_text())
    except (OSError, ValueError):
        return {}
