"""``bench data make``: a dataset for trials and tests, deterministic by seed, in any of the formats
(bench.data.formats: each writes its own files), from synthetic images, scikit-learn's digits or Python's help
texts (bench.data.sources); nothing is downloaded.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.config import option
from bench.data.formats import FORMATS, data_format
from bench.data.sources import TEXT_VOCABULARY, Images
from bench.errors import BenchError


@dataclass(frozen=True)
class MakeConfig:
    """bench data make's configuration: each option declared once, here (the command's flags come from it)."""
    path: str = option("", "The folder to write (it must not exist yet, or be empty).", argument=True)
    format: str = option("imagefolder", "imagefolder, tfrecord, cifar or tokens (or a plugin's: bench.data.formats).")
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
        spec = data_format(self.format)
        if self.source not in ("synthetic", "digits", "text"):
            raise BenchError(f"--from takes synthetic, digits or text (got '{self.source}')")
        of_images = ", ".join(n for n, s in FORMATS.items() if not s.tokens)
        of_tokens = ", ".join(n for n, s in FORMATS.items() if s.tokens)
        if self.source == "digits" and spec.tokens:
            raise BenchError(f"--from digits makes images: choose --format {of_images}")
        if self.source == "text" and not spec.tokens:
            raise BenchError(f"--from text makes token ids: --format {of_tokens}")
        if spec.image_side and self.source == "synthetic" and self.image_size not in (None, spec.image_side):
            raise BenchError(f"the {spec.name} format holds {spec.image_side} x {spec.image_side} images: leave out "
                             "--image-size")
        for name in ("images", "classes", "seq_len", "shards"):
            if getattr(self, name) < 1:
                raise BenchError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        if not spec.tokens and self.classes > 1000:
            raise BenchError(f"--classes must be <= 1000 for images (got {self.classes})")
        if not 0 < self.val_fraction < 1:
            raise BenchError(f"--val-fraction must be between 0 and 1 (got {self.val_fraction})")


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
        spec = data_format(cfg.format)
        counts = spec.load().write(work, cfg, None if spec.tokens else Images(cfg, spec.image_side, spec.label_offset))
        classes = {"digits": 10, "text": TEXT_VOCABULARY}.get(cfg.source, cfg.classes)
        record = {"format": cfg.format, "source": cfg.source, "classes": classes, "counts": counts,
                  "label_offset": spec.label_offset,
                  "token_dtype": ("uint16" if classes <= 65536 else "uint32") if spec.tokens else None,
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
    unit = data_format(cfg.format).samples
    print(f"data: {cfg.path}: {cfg.format} from {cfg.source}, {counts} {unit}, {record['classes']} classes, "
          f"{size / 1e6:.1f} MB", file=sys.stdout)
