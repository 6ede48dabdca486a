"""``imagefolder``: ROOT/train/<class>/*.JPEG and ROOT/val/<class>/*.JPEG, as ImageNet's training set ships and
as torchvision's ImageFolder reads it; or a flat ROOT/val/ with its label file beside it (ImageNet's validation
set as it ships: :data:`VAL_LABEL_FILES`). Labels: train/'s class folders in sorted order, for every split."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bench.data import IMAGE_SUFFIXES
from bench.data.sources import Images, held_out_count, jpeg
from bench.data.split import Split
from bench.errors import BenchError

if TYPE_CHECKING:  # the command's configuration imports this registry to check --format
    from bench.data.make import MakeConfig

# A flat val/ folder's labels, as ImageNet's validation set ships: one file beside val/ that names each image's class
# folder in train/ (its WordNet id). val_labels.txt: "FILE CLASS" per line (a comma or spaces between); or Kaggle's
# LOC_val_solution.csv: "ImageId,PredictionString" whose first word is the class (FILE = ImageId + .JPEG).
VAL_LABEL_FILES = ("val_labels.txt", "LOC_val_solution.csv")


def detect(root: Path) -> bool:
    return (root / "train").is_dir()


def class_folders(root: Path) -> list[str]:
    """The class names, in label order: train/'s folders, sorted, hidden ones (.ipynb_checkpoints, ...) skipped.
    Every split is labelled by this one map, so a class missing from val/ shifts no label."""
    folder = root / "train"
    return sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith(".")) \
        if folder.is_dir() else []


def classes(root: Path, info: dict) -> int:
    if not (root / "train").is_dir():
        raise BenchError(f"--data {root}: an ImageNet-layout dataset needs train/<class>/ folders")
    return len(class_folders(root))


def read(root: Path, info: dict, seq_len: int | None = None) -> dict[str, Split]:
    names = class_folders(root)
    return {"train": _split(root, "train", names), "val": _split(root, "val", names)}


def _split(root: Path, name: str, classes: list[str]) -> Split:
    folder = root / name
    if not folder.is_dir():
        return Split(np.zeros(0, np.int64), paths=[])
    label_of = {c: i for i, c in enumerate(classes)}
    found = sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    flat = sorted(f for f in folder.iterdir() if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES)
    if flat and name != "train":
        return _flat_split(root, folder, flat, label_of)
    unknown = [c for c in found if c not in label_of]
    if unknown:
        raise BenchError(f"--data {root}: {name}/ holds classes that train/ has not ({', '.join(unknown[:5])}"
                         f"{', ...' if len(unknown) > 5 else ''}): their labels would mean nothing")
    paths, labels = [], []
    for c in found:
        for f in sorted((folder / c).iterdir()):
            if f.suffix.lower() in IMAGE_SUFFIXES and not f.name.startswith("."):
                paths.append(str(f))
                labels.append(label_of[c])
    return Split(np.asarray(labels, np.int64), paths=paths)


def _flat_split(root: Path, folder: Path, files: list[Path], label_of: dict[str, int]) -> Split:
    """A split's images in one folder, labelled by the label file beside it (VAL_LABEL_FILES)."""
    source = next((root / n for n in VAL_LABEL_FILES if (root / n).is_file()), None)
    if source is None:
        raise BenchError(f"--data {root}: {folder.name}/ holds images without class folders; put its labels beside "
                         f"it in {VAL_LABEL_FILES[0]} (a line 'FILE CLASS' per image, CLASS a folder of train/) or "
                         f"Kaggle's {VAL_LABEL_FILES[1]}")
    named: dict[str, str] = {}
    for number, line in enumerate(source.read_text().splitlines(), 1):
        words = line.replace(",", " ").split()
        if not words or (number == 1 and words[0] == "ImageId"):
            continue
        if len(words) < 2:
            raise BenchError(f"--data {source}:{number}: expected 'FILE CLASS', got {line.strip()!r}")
        file = words[0] if source.name == VAL_LABEL_FILES[0] else f"{words[0]}.JPEG"
        named[file] = words[1]
    paths, labels, unlabelled, unknown = [], [], [], set()
    for f in files:
        cls = named.get(f.name)
        if cls is None:
            unlabelled.append(f.name)
        elif cls not in label_of:
            unknown.add(cls)
        else:
            paths.append(str(f))
            labels.append(label_of[cls])
    if unlabelled:
        raise BenchError(f"--data {root}: {source.name} gives no class for {len(unlabelled)} image(s) of "
                         f"{folder.name}/ ({', '.join(unlabelled[:3])}{', ...' if len(unlabelled) > 3 else ''})")
    if unknown:
        raise BenchError(f"--data {root}: {source.name} names classes that train/ has not "
                         f"({', '.join(sorted(unknown)[:5])})")
    return Split(np.asarray(labels, np.int64), paths=paths)


def held_out(labels: np.ndarray, n_val: int) -> list[int]:
    """The held-out samples `bench data make` writes: the first ``n_val`` in order, but for the last sample of a
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


def write(root: Path, cfg: MakeConfig, images: Images | None) -> dict[str, int]:
    labels = images.labels
    val = held_out(labels, held_out_count(len(labels), cfg.val_fraction))
    kept = set(val)
    counts = {}
    for name, part in (("train", [i for i in range(len(labels)) if i not in kept]), ("val", val)):
        for i in part:
            folder = root / name / f"n{int(labels[i]):08d}"  # ImageNet's synset-style class folders
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{name}_{i:08d}.JPEG").write_bytes(jpeg(images[i]))
        counts[name] = len(part)
    return counts
