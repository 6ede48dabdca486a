"""A throwaway data format and loader, registered from outside bench (HVDBENCH_PLUGINS=toy_data): the registries'
test that a new format or loader is this one file and needs no edit anywhere else (tests/multiproc/test_registry.py).

* ``npz``: ROOT/train.npz and ROOT/val.npz, each with ``images`` (N x H x W x 3 uint8) and ``labels``; held in
  memory (storage "arrays"), so every loader that reads arrays reads it.
* ``plain``: a PyTorch loader with no worker processes: the rank decodes and crops each batch itself, in the
  shard order every loader follows (bench.data.datasets.shard), through bench's own map-style dataset.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.data.datasets import held_out, shard
from bench.data.formats import DataFormat
from bench.data.formats import register as register_format
from bench.data.loaders import Loader, TorchImages
from bench.data.loaders import register as register_loader
from bench.data.split import Split


def detect(root: Path) -> bool:
    return (root / "train.npz").is_file()


def read(root: Path, info: dict, seq_len: int | None = None) -> dict[str, Split]:
    splits = {}
    for name in ("train", "val"):
        with np.load(root / f"{name}.npz") as held:
            splits[name] = Split(held["labels"].astype(np.int64), arrays=held["images"])
    return splits


def write(root: Path, cfg, images) -> dict[str, int]:
    n = len(images)
    n_val = max(1, round(n * cfg.val_fraction))
    parts = {"val": range(n_val), "train": range(n_val, n)}
    for name, part in parts.items():
        np.savez(root / f"{name}.npz", images=np.stack([images[i] for i in part]),
                 labels=np.asarray([images.labels[i] for i in part], np.int64))
    return {name: len(part) for name, part in parts.items()}


class PlainLoader(Loader):
    name = "plain"
    framework = "torch"
    reads = ("files", "arrays")

    def batches(self, dataset, split, size, batch_size, workers, seed, rank=0, world=1, epoch=0, device="cpu",
                epochs=1, framework=None, device_id=None):
        import torch

        self.check_reads(dataset)
        train = split == "train"
        samples = TorchImages(dataset, split, size, train, seed)
        n = len(dataset.splits[split])
        e = epoch
        while epochs is None or e < epoch + epochs:
            order = shard(n, rank, world, batch_size, seed, e) if train else held_out(n, rank, world)
            for start in range(0, len(order), batch_size):
                items = [samples[(int(i), e)] for i in order[start:start + batch_size]]
                yield torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items])
            e += 1


register_format(DataFormat("npz", "toy_data", "train.npz", storage="arrays", classes=None))
register_loader(PlainLoader())
