"""``tokens``: ROOT/train.bin and ROOT/val.bin, flat token ids (uint16 or uint32: meta.json's token_dtype, and its
vocabulary as ``classes``), memory-mapped and read as samples of the run's --seq-len (bench.data.datasets.Split).

`bench data make --format tokens`: ids drawn uniformly from the vocabulary (``--classes``), uint16 up to 65536
tokens, else uint32 (throughput only: nothing to learn); ``--from text``: Python's help texts as UTF-8 bytes, one
token per byte (bench.data.sources.TEXT_VOCABULARY), the last ``--val-fraction`` held out as one piece."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bench.data.sources import Images, held_out_count, text_bytes
from bench.data.split import Split
from bench.errors import BenchError

if TYPE_CHECKING:  # the command's configuration imports this registry to check --format
    from bench.data.make import MakeConfig

DTYPES = ("uint16", "uint32")


def detect(root: Path) -> bool:
    return (root / "train.bin").is_file()


def read(root: Path, info: dict, seq_len: int | None = None) -> dict[str, Split]:
    if not seq_len:
        raise BenchError(f"--data {root}: a tokens dataset trains the text models (--seq-len); not an image one")
    dtype = info.get("token_dtype") or "uint16"
    if dtype not in DTYPES:
        raise BenchError(f"--data {root}: token_dtype {dtype!r} in meta.json (uint16 or uint32)")
    if "classes" not in info:
        raise BenchError(f"--data {root}: a tokens dataset says its vocabulary in meta.json (classes), as bench data "
                         "make writes it")
    splits = {name: _split(root / f"{name}.bin", dtype, seq_len, int(info["classes"])) for name in ("train", "val")}
    if len(splits["train"]) == 0:
        raise BenchError(f"--data {root}: train.bin holds no sample of 2 x {seq_len} + 1 tokens")
    # the ids are checked against the vocabulary sample by sample as the loaders read them (Split.sample,
    # bench.data.loaders.token_windows): a scan of the whole file here read every byte of it on every rank
    return splits


def _split(path: Path, dtype: str, seq_len: int, vocab: int) -> Split:
    if not path.is_file() or path.stat().st_size == 0:
        return Split(np.zeros(0, np.int64), tokens=np.zeros(0, dtype), seq_len=seq_len, vocab=vocab)
    if path.stat().st_size % np.dtype(dtype).itemsize:
        raise BenchError(f"--data {path}: its size is not a whole number of {dtype} token ids")
    return Split(np.zeros(0, np.int64), tokens=np.memmap(path, dtype=dtype, mode="r"), seq_len=seq_len, vocab=vocab)


def write(root: Path, cfg: MakeConfig, images: Images | None) -> dict[str, int]:
    if cfg.source == "text":
        ids = np.frombuffer(text_bytes(), np.uint8)[:cfg.images * cfg.seq_len].astype(np.uint16)
        n_val = held_out_count(len(ids), cfg.val_fraction)
        parts = {"train": ids[:len(ids) - n_val], "val": ids[len(ids) - n_val:]}
    else:
        dtype = np.uint16 if cfg.classes <= 65536 else np.uint32
        rng = np.random.default_rng(cfg.seed)
        n_val = held_out_count(cfg.images, cfg.val_fraction)
        parts = {name: rng.integers(0, cfg.classes, n * cfg.seq_len, dtype=np.int64).astype(dtype)
                 for name, n in (("train", cfg.images - n_val), ("val", n_val))}
    for name, ids in parts.items():
        ids.tofile(root / f"{name}.bin")
    return {name: len(ids) for name, ids in parts.items()}
