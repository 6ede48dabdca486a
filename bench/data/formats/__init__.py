"""Dataset formats: every fact about a format lives in its DataFormat spec; the rest of bench asks it.

A format is one module (``bench.data.formats.<name>``, or a plugin's) that knows its files; nothing else. It
provides::

    detect(root) -> bool                      the folder is in this format (a dataset without meta.json)
    read(root, info, seq_len) -> {split: Split}   "train" and "val" (info: meta.json's record, or {})
    write(root, cfg, images) -> {split: count}   what `bench data make` writes (cfg: bench.data.make.MakeConfig;
                                              images: bench.data.sources.Images, None for token ids)
    classes(root, info) -> int                optional: the class count, where the files say it

Its spec says what the loaders, `bench data make`, `bench data bench` and the run's checks need: how its splits
hold their samples (:data:`STORAGE`: the loaders say which they read, bench.data.loaders), the label its first
class has on disk, the class count when meta.json gives none, a fixed image side. Another package adds a format
with :func:`register` (see bench.plugins): `bench data make --format NAME` writes it and every loader that reads
its storage reads it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from bench.data import meta
from bench.errors import BenchError

# How a format's splits hold their samples (bench.data.split.Split): image files by path, images in memory,
# a stream of records in shard files (no sample read by index), or flat token ids (the text models).
STORAGE = ("files", "arrays", "records", "tokens")


@dataclass(frozen=True)
class DataFormat:
    name: str
    module: str
    layout: str  # what it looks like on disk, for the messages that say what was expected
    storage: str = "files"  # one of STORAGE
    label_offset: int = 0  # the label the first class has on disk (TensorFlow's ImageNet TFRecords: 1)
    classes: int | None = 1000  # the class count when meta.json and the files say none (None: they must)
    image_side: int | None = None  # images of one fixed side (CIFAR-10: 32)
    fallback: bool = False  # recognised by its layout only when no other format is (a plain train/ folder)

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)

    @property
    def tokens(self) -> bool:
        return self.storage == "tokens"

    @property
    def samples(self) -> str:
        return "tokens" if self.tokens else "images"


FORMATS: dict[str, DataFormat] = {}


def register(spec: DataFormat) -> DataFormat:
    if spec.storage not in STORAGE:
        raise BenchError(f"data format {spec.name}: storage is one of {', '.join(STORAGE)} (got '{spec.storage}')")
    FORMATS[spec.name] = spec
    return spec


def data_format(name: str) -> DataFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise BenchError(f"unknown data format '{name}' (choose from: {', '.join(FORMATS)})") from None


def detect(path: str | Path) -> DataFormat:
    """The format of the dataset at ``path`` (meta.json's, else the first whose layout it has), or one line
    saying why it is none of them."""
    root = Path(path)
    if not root.exists():
        raise BenchError(f"--data {root}: no such file or folder")
    if not root.is_dir():
        raise BenchError(f"--data {root}: not a folder (a dataset is a folder: docs/data.md)")
    known = meta(root).get("format")
    if known in FORMATS:
        return FORMATS[known]
    for spec in sorted(FORMATS.values(), key=lambda s: s.fallback):
        if spec.load().detect(root):
            return spec
    if not any(root.iterdir()):
        raise BenchError(f"--data {root}: the folder is empty")
    raise BenchError(f"--data {root}: cannot tell its format ({'; '.join(s.layout for s in FORMATS.values())})")


for _spec in (
    DataFormat("imagefolder", "bench.data.formats.imagefolder",
               "an ImageNet folder train/<class>/*.JPEG, val/ likewise or flat with its label file", fallback=True),
    DataFormat("tfrecord", "bench.data.formats.tfrecord", "TFRecord shards train-*-of-*", storage="records",
               label_offset=1),
    DataFormat("cifar", "bench.data.formats.cifar", "cifar-10-batches-py/", storage="arrays", classes=10,
               image_side=32),
    DataFormat("tokens", "bench.data.formats.tokens", "tokens train.bin", storage="tokens", classes=None),
):
    register(_spec)
