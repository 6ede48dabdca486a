"""A dataset on disk as its samples: file paths or in-memory arrays, with labels, per split, and each rank's
shard of them (no framework imported here: the loaders read these).

Sharding, as DistributedSampler and tf.data's shard do it and the same for both frameworks: every epoch the
split's indices are shuffled by (seed, epoch), rank r takes positions r, r + W, r + 2W, ... (W ranks), so no two
ranks read the same sample in an epoch, and each rank's shard is cut to whole batches of equal count on every
rank (the last partial batch dropped) so that ranks stay in step.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.data import IMAGE_SUFFIXES, detect_format, meta
from bench.errors import BenchError


@dataclass
class Split:
    """One split of a dataset: images as ``paths`` (image files; None for in-memory data) or ``arrays`` (N x H x W
    x 3 uint8), with ``labels`` from 0; or ``tokens``, a flat array of token ids (memory-mapped) read as samples
    of ``seq_len`` (:meth:`sample`)."""
    labels: np.ndarray
    paths: list[str] | None = None
    arrays: np.ndarray | None = None
    shards: list[str] = field(default_factory=list)  # tfrecord: the shard files (samples counted in meta.json)
    tokens: np.ndarray | None = None
    seq_len: int = 0
    vocab: int = 0  # tokens: every id below it

    def __len__(self) -> int:
        if self.tokens is not None:  # sample i: tokens [2 L i, 2 L (i + 1)] (its last one only as a target)
            return max(0, (len(self.tokens) - 1) // (2 * self.seq_len))
        return len(self.labels)

    def __getstate__(self) -> dict:
        """Pickled for a loader's worker process (bench.data.loaders.worker_start): a memory-mapped token file by
        its path, so that a worker maps the same file instead of receiving a copy of it."""
        state = dict(self.__dict__)
        if isinstance(self.tokens, np.memmap) and self.tokens.filename:
            state["tokens"] = ("memmap", self.tokens.filename, self.tokens.dtype.str)
        return state

    def __setstate__(self, state: dict) -> None:
        tokens = state.get("tokens")
        if isinstance(tokens, tuple):
            state["tokens"] = np.memmap(tokens[1], dtype=np.dtype(tokens[2]), mode="r")
        self.__dict__.update(state)

    def sample(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """A token split's sample ``i``, as the text models train (bench.models.workloads.TokenSequences): the
        source (L tokens), the decoder's input (the next L), stacked (2, L), and the targets, the decoder's input
        one token on (L): a sequence and its continuation, cut from the flat file one after another."""
        n = self.seq_len
        window = np.asarray(self.tokens[2 * n * i:2 * n * (i + 1) + 1], np.int64)
        if self.vocab and window.max(initial=0) >= self.vocab:
            where = getattr(self.tokens, "filename", None) or "the token split"
            raise BenchError(f"{where} holds token id {window.max()} (sample {i}), outside the vocabulary "
                             f"0..{self.vocab - 1}")
        return np.stack([window[:n], window[n:2 * n]]), window[n + 1:]


@dataclass
class Dataset:
    root: Path
    format: str
    classes: int
    splits: dict[str, Split]
    label_offset: int = 0  # tfrecord: ImageNet's scripts count labels from 1


# A flat val/ folder's labels, as ImageNet's validation set ships: one file beside val/ that names each image's class
# folder in train/ (its WordNet id). val_labels.txt: "FILE CLASS" per line (a comma or spaces between); or Kaggle's
# LOC_val_solution.csv: "ImageId,PredictionString" whose first word is the class (FILE = ImageId + .JPEG).
VAL_LABEL_FILES = ("val_labels.txt", "LOC_val_solution.csv")


def class_folders(root: Path) -> list[str]:
    """The class names, in label order: train/'s folders, sorted, hidden ones (.ipynb_checkpoints, ...) skipped.
    Every split is labelled by this one map, so a class missing from val/ shifts no label."""
    folder = root / "train"
    return sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith(".")) \
        if folder.is_dir() else []


def _imagefolder(root: Path, name: str, classes: list[str]) -> Split:
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


def _cifar(root: Path, train: bool) -> Split:
    folder = root / "cifar-10-batches-py" if (root / "cifar-10-batches-py").is_dir() else root
    files = sorted(folder.glob("data_batch_*")) if train else [folder / "test_batch"]
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


def class_count(path: str | Path) -> int:
    """The dataset's class count without reading its samples: what a --data run's classifier gets by default."""
    root = Path(path)
    fmt, info = detect_format(root), meta(root)
    if fmt == "imagefolder":
        if not (root / "train").is_dir():
            raise BenchError(f"--data {root}: an ImageNet-layout dataset needs train/<class>/ folders")
        return len(class_folders(root))
    if fmt == "tokens" and "classes" not in info:
        raise BenchError(f"--data {root}: a tokens dataset says its vocabulary in meta.json (classes), as bench data "
                         "make writes it")
    return int(info.get("classes", 10 if fmt == "cifar" else 1000))


def _tokens(root: Path, name: str, dtype: str, seq_len: int, vocab: int) -> Split:
    path = root / f"{name}.bin"
    if not path.is_file() or path.stat().st_size == 0:
        return Split(np.zeros(0, np.int64), tokens=np.zeros(0, dtype), seq_len=seq_len, vocab=vocab)
    if path.stat().st_size % np.dtype(dtype).itemsize:
        raise BenchError(f"--data {path}: its size is not a whole number of {dtype} token ids")
    return Split(np.zeros(0, np.int64), tokens=np.memmap(path, dtype=dtype, mode="r"), seq_len=seq_len, vocab=vocab)


def load(path: str | Path, seq_len: int | None = None) -> Dataset:
    """The dataset at ``path``, checked: labels (token ids) within the class count (the vocabulary), a training
    split that is not empty. A tokens dataset is read as samples of ``seq_len`` (the run's --seq-len)."""
    root = Path(path)
    fmt = detect_format(root)
    info = meta(root)
    if fmt == "tokens":
        if not seq_len:
            raise BenchError(f"--data {root}: a tokens dataset trains the text models (--seq-len); not an image one")
        dtype = info.get("token_dtype") or "uint16"
        if dtype not in ("uint16", "uint32"):
            raise BenchError(f"--data {root}: token_dtype {dtype!r} in meta.json (uint16 or uint32)")
        vocab = class_count(root)
        splits = {name: _tokens(root, name, dtype, seq_len, vocab) for name in ("train", "val")}
        if len(splits["train"]) == 0:
            raise BenchError(f"--data {root}: train.bin holds no sample of 2 x {seq_len} + 1 tokens")
        # the ids are checked against the vocabulary sample by sample as the loaders read them (Split.sample,
        # bench.data.loaders.token_windows): a scan of the whole file here read every byte of it on every rank
        return Dataset(root, fmt, vocab, splits)
    if fmt == "imagefolder":
        names = class_folders(root)
        splits = {"train": _imagefolder(root, "train", names), "val": _imagefolder(root, "val", names)}
    elif fmt == "cifar":
        splits = {"train": _cifar(root, True), "val": _cifar(root, False)}
    elif fmt == "tfrecord":
        counts = info.get("counts", {})
        splits = {name: Split(np.zeros(counts.get(key, 0), np.int64),
                              shards=sorted(str(p) for p in root.glob(f"{prefix}-*-of-*")))
                  for name, key, prefix in (("train", "train", "train"), ("val", "val", "validation"))}
    classes = class_count(root)
    train = splits["train"]
    if len(train) == 0 and not train.shards:
        raise BenchError(f"--data {root}: the training split has no samples")
    bad = [int(x) for x in np.unique(train.labels) if not 0 <= x < classes] if len(train.labels) else []
    if bad:
        raise BenchError(f"--data {root}: labels {bad[:5]} are outside 0..{classes - 1}")
    return Dataset(root, fmt, classes, splits, int(info.get("label_offset", 1 if fmt == "tfrecord" else 0)))


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
