"""``tfrecord``: ROOT/train-NNNNN-of-NNNNN and ROOT/validation-NNNNN-of-NNNNN, tf.train.Example records with
image/encoded (JPEG bytes) and image/class/label, as TensorFlow's ImageNet scripts write them: their labels start
at 1, 0 being "background" (``label_offset`` in meta.json says so). The sample counts come from meta.json (a
record stream has no length); the tf loader reads the shards whole (bench.data.loaders.TFLoader)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bench.data.sources import Images, held_out_count, jpeg
from bench.data.split import Split
from bench.tfutil import import_tf

if TYPE_CHECKING:  # the command's configuration imports this registry to check --format
    from bench.data.make import MakeConfig

PREFIXES = {"train": "train", "val": "validation"}  # split -> the shard files' prefix


def detect(root: Path) -> bool:
    return any(root.glob("train-*-of-*"))


def read(root: Path, info: dict, seq_len: int | None = None) -> dict[str, Split]:
    counts = info.get("counts", {})
    return {name: Split(np.zeros(counts.get(name, 0), np.int64),
                        shards=sorted(str(p) for p in root.glob(f"{prefix}-*-of-*")))
            for name, prefix in PREFIXES.items()}


def write(root: Path, cfg: MakeConfig, images: Images | None) -> dict[str, int]:
    tf, _ = import_tf()
    labels = images.labels + images.label_offset  # on disk from the spec's label_offset, as meta.json says
    n_val = held_out_count(len(labels), cfg.val_fraction)
    parts = {"train": np.arange(n_val, len(labels)), "val": np.arange(n_val)}
    for name, index in parts.items():
        shards = np.array_split(index, cfg.shards if name == "train" else 1)
        for s, part in enumerate(shards):
            with tf.io.TFRecordWriter(str(root / f"{PREFIXES[name]}-{s:05d}-of-{len(shards):05d}")) as writer:
                for i in part:
                    feature = {
                        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg(images[i])])),
                        "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"JPEG"])),
                        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(
                            value=[int(labels[i])])),
                    }
                    writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return {"train": len(parts["train"]), "val": n_val}
