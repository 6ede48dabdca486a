"""A dataset on disk as its samples: file paths or in-memory arrays, with labels, per split, and each rank's
shard of them (no framework imported here: the loaders read these).

Sharding, as DistributedSampler and tf.data's shard do it and the same for both frameworks: every epoch the
split's indices are shuffled by (seed, epoch), rank r takes positions r, r + W, r + 2W, ... (W ranks), so no two
ranks read the same sample in an epoch, and each rank's shard is cut to whole batches of equal count on every
rank (the last partial batch dropped) so that ranks stay in step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.data import formats, meta
from bench.data.split import Split
from bench.errors import BenchError

TRAIN, VAL = "train", "val"  # the splits' names, as the formats' ``read`` returns them


@dataclass
class Dataset:
    root: Path
    format: str  # its name in bench.data.formats
    classes: int
    splits: dict[str, Split]
    label_offset: int = 0  # the label the first class has on disk (tfrecord: ImageNet's scripts count from 1)

    @property
    def spec(self) -> formats.DataFormat:
        return formats.data_format(self.format)

    @property
    def train(self) -> Split:
        """The training split (every format has one)."""
        return self.splits[TRAIN]

    @property
    def val(self) -> Split:
        """The held-out split (every format has one; empty where the dataset holds no held-out samples)."""
        return self.splits[VAL]

    @property
    def tokens(self) -> bool:
        return self.spec.tokens


def class_count(path: str | Path) -> int:
    """The dataset's class count without reading its samples: what a --data run's classifier gets by default
    (what the format's files say where they do, else meta.json's, else the format's usual count)."""
    root = Path(path)
    return _class_count(root, formats.detect(root), meta(root))


def _class_count(root: Path, spec: formats.DataFormat, info: dict) -> int:
    module = spec.load()
    if hasattr(module, "classes"):
        return module.classes(root, info)
    if "classes" not in info and spec.classes is None:
        raise BenchError(f"--data {root}: a {spec.name} dataset says its class count in meta.json (classes), as "
                         "bench data make writes it")
    return int(info.get("classes", spec.classes))


def load(path: str | Path, seq_len: int | None = None) -> Dataset:
    """The dataset at ``path``, read by its format's module (bench.data.formats) and checked: labels within the
    class count, a training split that is not empty. A tokens dataset is read as samples of ``seq_len`` (the run's
    --seq-len); its ids are checked against the vocabulary as they are read."""
    root = Path(path)
    spec, info = formats.detect(root), meta(root)
    splits = spec.load().read(root, info, seq_len)
    classes = _class_count(root, spec, info)
    if spec.tokens:
        return Dataset(root, spec.name, classes, splits)
    train = splits[TRAIN]
    if len(train) == 0 and not train.shards:
        raise BenchError(f"--data {root}: the training split has no samples")
    bad = [int(x) for x in np.unique(train.labels) if not 0 <= x < classes] if len(train.labels) else []
    if bad:
        raise BenchError(f"--data {root}: labels {bad[:5]} are outside 0..{classes - 1}")
    return Dataset(root, spec.name, classes, splits, int(info.get("label_offset", spec.label_offset)))


def state(root: str | Path) -> dict[str, list[int]]:
    """What a change to the dataset at ``root`` changes, without reading its samples: (size, mtime) of every file
    at its top and in its first level of folders (meta.json, the CIFAR batches, the TFRecord shards, the token
    files), and (entries, mtime) of every folder two levels down (an ImageNet folder's class folders: a file
    added, removed or renamed there). A file rewritten in place inside a class folder is not seen."""
    root = Path(root)
    seen: dict[str, list[int]] = {}

    def note(path: Path, depth: int) -> None:
        for entry in sorted(path.iterdir()):
            info = entry.stat()
            name = str(entry.relative_to(root))
            if entry.is_dir():
                if depth == 2:
                    seen[name] = [sum(1 for _ in entry.iterdir()), info.st_mtime_ns]
                else:
                    note(entry, depth + 1)
            else:
                seen[name] = [info.st_size, info.st_mtime_ns]

    note(root, 1)
    return seen


def check_unchanged(root: str | Path, before: dict[str, list[int]]) -> None:
    """One line naming what changed since ``before`` (:func:`state`), if anything did."""
    try:
        after = state(root)
    except OSError as exc:
        raise BenchError(f"--data {root} changed during the run: {exc}") from None
    changed = sorted(set(before) ^ set(after) | {k for k in before.keys() & after.keys() if before[k] != after[k]})
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        raise BenchError(f"--data {root} changed during the run ({', '.join(changed[:3])}{more}): the result would "
                         "mix two datasets; nothing written")


def shard(n: int, rank: int, world: int, batch_size: int, seed: int, epoch: int = 0) -> np.ndarray:
    """Rank ``rank``'s sample indices for ``epoch`` (module docstring); an error when the split cannot give every
    rank one whole batch."""
    size = shard_size(n, world, batch_size)
    return np.random.default_rng([seed, epoch]).permutation(n)[rank::world][:size]


def shard_size(n: int, world: int, batch_size: int) -> int:
    """The samples in each rank's :func:`shard` of ``n``: whole batches of an equal share, floor(floor(n / W) / B) x
    B; an error where that is none."""
    per_rank = (n // world) // batch_size * batch_size
    if per_rank == 0:
        raise BenchError(f"the split has {n} samples: fewer than {world} rank(s) x batch {batch_size}")
    return per_rank


def rank_samples(split: Split, world: int, batch_size: int) -> int | None:
    """The training samples each of ``world`` ranks takes per epoch: whole batches, the same count on every rank;
    None where the split does not say its size (TFRecord shards without counts). A split read by index: its
    :func:`shard`'s. TFRecord shards: a rank reads whole files, positions r, r + W, ... of the epoch's order of the
    S files (bench.data.loaders), so at least floor(S / W) of them, and each file holds at least floor(n / S) of
    the n records where the files are of near-equal size (as TensorFlow's ImageNet scripts and bench data make
    write them): every rank takes floor(S / W) x floor(n / S), cut to whole batches. Fewer files than ranks, or
    too few records for a batch, is an error."""
    n = len(split)
    if not split.shards:
        return shard_size(n, world, batch_size)
    files = len(split.shards)
    if files < world:
        raise BenchError(f"{files} TFRecord training shard file(s) for {world} ranks: a rank reads whole files, "
                         f"so each needs one at least (write the dataset with as many shards as ranks or more: "
                         f"bench data make --shards {world})")
    if not n:
        return None
    per_rank = (files // world) * (n // files) // batch_size * batch_size
    if per_rank == 0:
        raise BenchError(f"the split has {n} records in {files} files: a rank's {files // world} file(s) hold no "
                         f"whole batch of {batch_size}")
    return per_rank


def held_out(n: int, rank: int, world: int) -> np.ndarray:
    """Rank ``rank``'s part of a held-out split for evaluation: samples rank, rank + W, ... in order, none dropped,
    so that the ranks together score every sample once (bench.measure.goal)."""
    return np.arange(n)[rank::world]
