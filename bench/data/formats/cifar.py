"""``cifar``: ROOT/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}, the CIFAR-10 python format as
distributed (pickled dicts of uint8 rows of 3 x 32 x 32, channel-major), read into memory."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bench.data.sources import Images, held_out_count
from bench.data.split import Split
from bench.errors import BenchError

if TYPE_CHECKING:  # the command's configuration imports this registry to check --format
    from bench.data.make import MakeConfig


def _folder(root: Path) -> Path:
    return root / "cifar-10-batches-py" if (root / "cifar-10-batches-py").is_dir() else root


def detect(root: Path) -> bool:
    return (root / "cifar-10-batches-py").is_dir() or any(root.glob("data_batch_*"))


def read(root: Path, info: dict, seq_len: int | None = None) -> dict[str, Split]:
    folder = _folder(root)
    return {"train": _split(sorted(folder.glob("data_batch_*")), folder),
            "val": _split([folder / "test_batch"], folder)}


def _split(files: list[Path], folder: Path) -> Split:
    rows, labels = [], []
    for f in files:
        if not f.is_file():
            continue
        try:
            with open(f, "rb") as handle:
                batch = pickle.load(handle, encoding="bytes")
            rows.append(np.asarray(batch[b"data"], np.uint8))
            labels += list(batch[b"labels"])
        except (OSError, pickle.UnpicklingError, KeyError, EOFError, ValueError) as exc:
            raise BenchError(f"--data {f}: not a CIFAR-10 batch ({exc})") from None
    if not rows:
        return Split(np.zeros(0, np.int64), arrays=np.zeros((0, 32, 32, 3), np.uint8))
    data = np.concatenate(rows)
    if data.shape[1] != 3072:
        raise BenchError(f"--data {folder}: CIFAR-10 rows hold 3072 bytes (got {data.shape[1]})")
    return Split(np.asarray(labels, np.int64), arrays=data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))


def write(root: Path, cfg: MakeConfig, images: Images | None) -> dict[str, int]:
    """Five training batches and a test batch, rows of 3072 uint8 (red, green, blue planes of 32 x 32), labels as a
    list; batches.meta names the classes."""
    labels = images.labels
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rows = np.stack([images[i][:32, :32].transpose(2, 0, 1).reshape(-1) for i in range(len(images))])
    if rows.shape[1] != 3072:
        raise BenchError("the CIFAR-10 format holds 32 x 32 images: use --image-size 32")
    n_val = held_out_count(len(labels), cfg.val_fraction)
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
