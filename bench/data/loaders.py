"""Input pipelines, one object per loader, registered by name (``--loader``): each reads a rank's shard of a split
(bench.data.datasets.shard) as the field builds the pipeline for its framework, and yields batches of
``batch_size`` images at ``image_size`` x ``image_size``: the torch and tf loaders' as uint8 pixels, which the
trainer normalises with ImageNet's mean and deviation on the run's device, once per batch (the field's pipelines
where cores are scarce: a per-image normalisation in tf.data cost about 45% of a core); DALI's normalised by DALI.

Training augmentation, the same in both: decode, a random crop of 8-100% of the area at an aspect ratio of 3/4
to 4/3 resized to the run's size (Inception's "random resized crop", ResNet's standard), a horizontal flip half
the time; CIFAR-size images (32 x 32 in memory): a random 32 x 32 crop of the image padded by 4, and
the flip. Held-out split: the centre crop of 87.5% resized, no flip; each rank reads its part once
(bench.data.datasets.held_out), the last partial batch kept.

* ``torch``: torch.utils.data.DataLoader with ``workers`` worker processes (each one core), pinned memory on a
  GPU, two batches prefetched per worker; decoding and cropping with Pillow (torchvision's own transforms do the
  same through Pillow; PyPI's torchvision is the CUDA build and cannot load beside a CPU PyTorch). The workers
  start from a fork server (:func:`worker_start`), never forked from the rank itself.
* ``dali``: NVIDIA DALI for either framework (:class:`DaliLoader`).
* ``tf``: tf.data: the file names shuffled and sharded, ``map`` with ``workers`` parallel calls
  (decode_and_crop_jpeg: only the crop is decoded, as TensorFlow's ResNet pipeline does; a PNG is decoded whole,
  then cropped), batch, prefetch;
  tf.data's own thread pool held to ``workers`` threads so that the count means what it means for DataLoader.
  TFRecord shards: a rank reads whole files; every epoch the files in an order of (seed, epoch), the same on every
  rank, rank r taking positions r, r + W, ... of it, read at once with their records taken in turn (a fixed
  order, so a resumed run reads what an uninterrupted one does), shuffled in a buffer of four batches seeded by
  (seed, epoch), and cut to the count every rank shares (bench.data.datasets.rank_samples).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bench import scratch
from bench.data.datasets import Dataset, held_out, rank_samples, shard
from bench.data.split import Split
from bench.errors import BenchError
from bench.tfutil import import_tf

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
# TFRecord shards one rank reads at once, their records taken in turn: part of the record order, so a constant
READ_CYCLE = 4
# DALI's batches in flight (its prefetch_queue_depth): each epoch's pipeline runs exactly its epoch's batches, and
# the next epoch's, built beforehand in a helper thread, starts its first ones as this one's last are handed over.
PREFETCH = 2
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)


def crop_box(rng: np.random.Generator, width: int, height: int) -> tuple[int, int, int, int]:
    """A random resized crop's box (left, top, width, height): torchvision's algorithm (10 tries at a random area
    and log-uniform aspect ratio, else the centre crop at the nearest allowed ratio)."""
    area = width * height
    for _ in range(10):
        target = area * rng.uniform(*SCALE)
        ratio = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        w, h = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1)), w, h
    ratio = min(max(width / height, RATIO[0]), RATIO[1])
    w, h = (width, round(width / ratio)) if width / height < RATIO[0] else (round(height * ratio), height)
    w, h = min(w, width), min(h, height)
    return (width - w) // 2, (height - h) // 2, w, h


def worker_start():
    """How a DataLoader's workers start: forked from multiprocessing's fork server, a single-threaded process
    started once per rank with PyTorch, Pillow and this module already imported, and not from the rank. By the
    time a loader starts, the rank runs threads (the collectives' library, the stall watchdog, the telemetry
    sampler) that may hold a lock at the instant of a fork, and a child forked then waits on that lock for ever:
    a held-out loader started at an evaluation hung a run that way (both ranks stalled in the evaluate). Python
    3.14 makes the fork server the default on Linux for this reason. The cost: the dataset's description is
    pickled to each worker (a token file goes by its path: bench.data.split.Split); a worker whose fork
    server is gone leaves within the DataLoader's 5 s status check, and one whose rank is gone at once
    (:func:`watch_rank`). The queues' semaphores are then named ones, which multiprocessing's resource tracker
    (a process of its own) removes after a rank that died (a stall, a kill) could not; its warning that it did
    is not printed (the rank's own line says why). The fork server's socket goes into the rank's own temporary
    folder (bench.scratch), which a rank killed outright does not leave behind."""
    import multiprocessing
    import sys

    scratch.use_for_multiprocessing()
    quiet = "ignore::UserWarning:multiprocessing.resource_tracker"  # passed to the helpers it starts (-W)
    if quiet not in sys.warnoptions:
        sys.warnoptions.append(quiet)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "PIL.Image", "bench.data.loaders"])
    return context


def watch_rank(rank_pid: int, worker_id: int) -> None:
    """Each DataLoader worker's init: the worker ends as soon as its rank does, however the rank ended (SIGKILL
    too). Started by the fork server, a worker is the server's child, not the rank's, so PyTorch's own check (is
    my parent still there?) cannot see the rank go; and the server outlives the rank while a worker holds its
    pipe. A thread waits on the rank's pidfd, which the kernel makes readable when the rank exits (a poll of its
    pid each second where the kernel has no pidfd)."""
    import select
    import threading
    import time

    try:
        handle = os.pidfd_open(rank_pid)
    except ProcessLookupError:
        os._exit(0)
    except (OSError, AttributeError):
        handle = None

    def wait() -> None:
        if handle is not None:
            select.select([handle], [], [])
        else:
            while os.path.exists(f"/proc/{rank_pid}"):
                time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=wait, name="hvdbench-rank-watch", daemon=True).start()


class ShardSampler:
    """A rank's shard (bench.data.datasets.shard) for ``epochs`` epochs from ``epoch`` (None: on without end), as
    (sample index, epoch) pairs: one DataLoader, its workers kept, reads every epoch (as DistributedSampler with
    set_epoch and persistent workers do), with each epoch's own shuffle."""

    def __init__(self, n: int, rank: int, world: int, batch_size: int, seed: int, epoch: int,
                 epochs: int | None) -> None:
        self.args, self.epoch, self.epochs = (n, rank, world, batch_size, seed), epoch, epochs
        self.per_epoch = len(shard(n, rank, world, batch_size, seed, epoch))

    def __iter__(self):
        e = self.epoch
        while self.epochs is None or e < self.epoch + self.epochs:
            n, rank, world, batch_size, seed = self.args
            for i in shard(n, rank, world, batch_size, seed, e):
                yield int(i), e
            e += 1

    def __len__(self) -> int:
        return self.per_epoch * (self.epochs or 1)


class TorchImages:
    """A map-style dataset of a split: item (i, epoch) is sample i decoded, cropped and flipped, with a generator
    seeded by (seed, epoch, i) so that any worker gives the same sample. It stays uint8 pixels (3, size, size), a
    quarter of float32's bytes through the workers' queues, the pinned buffers and the host-to-device copy, as the
    field's production pipelines move them; the trainer normalises it on the run's device
    (bench.modes.torch_common.TorchTrainer.to_device, with :data:`MEAN` and :data:`STD`)."""

    def __init__(self, dataset: Dataset, split: str, size: int, train: bool, seed: int) -> None:
        self.split, self.size, self.train, self.seed = dataset.splits[split], size, train, seed

    def image(self, i: int):
        from PIL import Image

        if self.split.paths is not None:
            path = self.split.paths[i]
            try:
                with Image.open(path) as im:
                    return im.convert("RGB")
            except OSError as exc:
                raise BenchError(f"cannot decode {path}: {exc}") from None
        return Image.fromarray(self.split.arrays[i])

    def __getitem__(self, item: tuple[int, int]):
        import torch
        from PIL import Image

        i, epoch = item
        rng = np.random.default_rng([self.seed, epoch, i])
        im = self.image(i)
        if self.split.arrays is not None and im.size[0] <= 64:  # CIFAR-size: pad 4, random crop, flip
            pixels = np.pad(np.asarray(im), ((4, 4), (4, 4), (0, 0)))
            if self.train:
                x, y = rng.integers(0, 9, 2)
                pixels = pixels[y:y + 32, x:x + 32]
            else:
                pixels = pixels[4:36, 4:36]
            if self.size != 32:
                pixels = np.asarray(Image.fromarray(pixels).resize((self.size, self.size), Image.BILINEAR))
        else:
            w, h = im.size
            if self.train:
                left, top, cw, ch = crop_box(rng, w, h)
            else:
                side = round(min(w, h) * 0.875)
                left, top, cw, ch = (w - side) // 2, (h - side) // 2, side, side
            pixels = np.asarray(im.resize((self.size, self.size), Image.BILINEAR, box=(left, top, left + cw,
                                                                                      top + ch)))
        if self.train and rng.random() < 0.5:
            pixels = pixels[:, ::-1]
        return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1))), int(self.split.labels[i])


class TorchTokens:
    """A map-style dataset of a token split: item (i, epoch) is sample i (bench.data.split.Split.sample), read
    from the memory-mapped file."""

    def __init__(self, dataset: Dataset, split: str) -> None:
        self.split = dataset.splits[split]

    def __getitem__(self, item: tuple[int, int]):
        import torch

        pair, target = self.split.sample(item[0])
        return torch.from_numpy(pair), torch.from_numpy(target)


class Loader:
    """What every loader says of itself; its ``batches`` yields (images, labels) batches of a split as its
    framework takes them (``framework`` "any": either, as the run asks)."""
    name = ""
    framework = "any"
    reads: tuple[str, ...] = ()  # the storage it reads (bench.data.formats.STORAGE)
    requires: str | None = None  # a module it needs beyond its framework (installed() looks for it)
    exact_held_out = True  # its held-out batches hold every sample once (else the framework's loader scores)
    graph_only = False  # can build its pipeline with no Python in it (tf-native ps builds it on each worker)
    decodes_on_gpu = False  # decodes on the run's GPU where it has one (device "cuda" and a device_id)

    def check_reads(self, dataset: Dataset) -> None:
        """One line when this loader cannot read ``dataset``'s format, naming those that can."""
        spec = dataset.spec
        if spec.storage not in self.reads:
            able = [n for n, x in LOADERS.items() if spec.storage in x.reads]
            raise BenchError(f"the {self.name} loader does not read {spec.name} datasets ({spec.storage}): "
                             f"--loader {' or '.join(able)}")


class TorchLoader(Loader):
    name = "torch"
    framework = "torch"
    reads = ("files", "arrays", "tokens")

    def batches(self, dataset: Dataset, split: str, size: int, batch_size: int, workers: int, seed: int,
                rank: int = 0, world: int = 1, epoch: int = 0, device: str = "cpu",
                epochs: int | None = 1, framework: str | None = None,
                device_id: int | None = None) -> Iterator[tuple[Any, Any]]:
        """Batches of ``epochs`` epochs from ``epoch`` (None: without end), in one pipeline."""
        import PIL  # noqa: F401  (the workers decode with it: a missing Pillow is named here, in one line)
        import torch

        self.check_reads(dataset)
        train = split == "train"
        n = len(dataset.splits[split])
        sampler = ShardSampler(n, rank, world, batch_size, seed, epoch, epochs) if train else \
            [(int(i), 0) for i in held_out(n, rank, world)]
        data = TorchTokens(dataset, split) if dataset.tokens else TorchImages(dataset, split, size, train, seed)
        # Its own generator: a DataLoader draws its workers' base seed when its iterator starts, from PyTorch's
        # global generator without one, which would move the rank's dropout stream (a resumed run starts its
        # pipeline after the checkpoint gave that stream back, bench.measure.checkpoint). The samples' crops and
        # flips are keyed by (seed, epoch, sample), whatever the workers' seeds.
        loader = torch.utils.data.DataLoader(
            data, batch_size=batch_size, sampler=sampler, num_workers=workers, drop_last=train,
            pin_memory=device == "cuda", prefetch_factor=2 if workers else None,
            multiprocessing_context=worker_start() if workers else None,
            worker_init_fn=functools.partial(watch_rank, os.getpid()) if workers else None,
            generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch * 1009 + rank))
        return Queued(loader)


class Queued:
    """A DataLoader's batches, with how many of them its workers have made ahead readable (bench.data.feed:
    the timed windows start with that queue in its steady state). ``depth``: the most it holds (prefetch_factor
    batches per worker); 0 without workers."""

    def __init__(self, loader) -> None:
        self._it = iter(loader)
        self.depth = (loader.prefetch_factor or 0) * loader.num_workers if loader.num_workers else 0

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._it)

    def ready(self) -> int | None:
        """Batches made and not yet drawn: those in the result queue (the pin-memory thread's, on a GPU) and those
        that arrived ahead of their turn; None where the queue cannot tell its size."""
        if not self.depth:
            return 0
        try:
            queued = self._it._data_queue.qsize()
        except (AttributeError, NotImplementedError):
            return None
        ahead = sum(1 for info in getattr(self._it, "_task_info", {}).values() if len(info) == 2)
        return min(self.depth, queued + ahead)

    def close(self) -> None:
        shutdown = getattr(self._it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


class TFLoader(Loader):
    name = "tf"
    framework = "tensorflow"
    reads = ("files", "arrays", "records", "tokens")
    graph_only = True

    def batches(self, dataset: Dataset, split: str, size: int, batch_size: int, workers: int, seed: int,
                rank: int = 0, world: int = 1, epoch: int = 0, device: str = "cpu",
                epochs: int | None = 1, framework: str | None = None,
                device_id: int | None = None) -> Iterator[tuple[Any, Any]]:
        """Batches of ``epochs`` epochs from ``epoch`` (None: without end), in one pipeline (:meth:`dataset`)."""
        yield from self.dataset(dataset, split, size, batch_size, workers, seed, rank, world, epoch, epochs)

    def dataset(self, dataset: Dataset, split: str, size: int, batch_size: int, workers: int, seed: int,
                rank: Any = 0, world: int = 1, epoch: int = 0, epochs: int | None = 1, graph_only: bool = False):
        """The pipeline as a tf.data.Dataset. The training shard's sample order comes from a generator of
        :func:`bench.data.datasets.shard`'s (the same order as the torch loader's), epoch after epoch; TFRecord
        shards: the file list repeated. ``graph_only``: no Python in the pipeline, so that it runs where this
        process is not (tf-native ps builds it on each worker, ``rank`` then the worker's index as a tensor): the
        rank's static shard of the indices (i = rank mod ``world``, as tf.data's ``shard``), shuffled every epoch
        by TensorFlow's shuffle seeded by (seed, epoch), cut to the same whole batches as :func:`shard`'s."""
        self.check_reads(dataset)
        tf, _ = import_tf()
        train = split == "train"
        part = dataset.splits[split]
        parallel = workers or tf.data.AUTOTUNE

        # Stateless random ops, each sample's keyed by (seed, epoch, index): a pipeline started at any epoch (a
        # resumed run's) crops and flips every sample as an uninterrupted one does.
        def keys(epoch_, index):
            key = tf.stack([tf.constant(seed, tf.int64), tf.cast(epoch_, tf.int64) * (1 << 32) + index])
            split = tf.random.experimental.stateless_split(key, num=2)
            return split[0], split[1]  # the crop's, the flip's

        def crop_decode(encoded, key):
            def window_of(shape):  # (top, left, height, width) of the crop in an image of ``shape``
                if train:
                    begin, box, _ = tf.image.stateless_sample_distorted_bounding_box(
                        shape, tf.zeros([1, 0, 4]), seed=key, min_object_covered=0.0, aspect_ratio_range=RATIO,
                        area_range=SCALE, max_attempts=10, use_image_if_no_bounding_boxes=True)
                    return tf.stack([begin[0], begin[1], box[0], box[1]])
                side = tf.cast(tf.cast(tf.minimum(shape[0], shape[1]), tf.float32) * 0.875, tf.int32)
                return tf.stack([(shape[0] - side) // 2, (shape[1] - side) // 2, side, side])

            def jpeg():  # only the crop decoded
                return tf.io.decode_and_crop_jpeg(encoded, window_of(tf.io.extract_jpeg_shape(encoded)), channels=3)

            def other():  # a PNG (ImageNet's training set holds one named .JPEG): decoded whole, then cropped
                image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
                w = window_of(tf.shape(image))
                return tf.slice(image, [w[0], w[1], 0], [w[2], w[3], 3])

            image = tf.cond(tf.io.is_jpeg(encoded), jpeg, other)
            return pixels(tf.image.resize(image, [size, size], method="bilinear"))

        def pixels(resized):  # bilinear's float pixels rounded to uint8, as Pillow's and torchvision's resize gives
            return tf.saturate_cast(tf.round(resized), tf.uint8)

        def finish(image, label, key):  # uint8 out: the trainer normalises the batch on the device (TFTrainer)
            if train:
                image = tf.image.stateless_random_flip_left_right(image, seed=key)
            return image, label

        if dataset.spec.storage == "records":  # a stream of records (tfrecord), not samples by index
            # the files read at once: a fixed count, never the worker count, whose default follows each node's
            # cores (an order that depended on it would change when a resumed run's workers do); the workers are
            # the parallel reads within it
            cycle = max(1, min(len(part.shards), READ_CYCLE))
            parallel = min(workers, cycle) if workers else tf.data.AUTOTUNE
            spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                    "image/class/label": tf.io.FixedLenFeature([], tf.int64)}

            def read(files):  # the files read at once, their records taken in turn (deterministic): a resumed
                # run's epochs and every rerun read the same records in the same order, whichever file reads faster.
                # One reader a file at most: tf.data refuses more parallel calls than files in the cycle (a held-out
                # split of one file with 2 workers failed at the first evaluation).
                return files.interleave(tf.data.TFRecordDataset, cycle_length=cycle, num_parallel_calls=parallel,
                                        deterministic=True)

            if train:  # every epoch the files in an order of (seed, epoch), the same on every rank; the rank
                # takes positions r, r + W, ... of it, its records shuffled, cut to the quota every rank shares
                quota = rank_samples(part, world, batch_size)
                names = tf.constant(part.shards)

                def epoch_records(e):
                    order = tf.random.experimental.stateless_shuffle(
                        names, seed=tf.stack([tf.constant(seed, tf.int64), tf.cast(e, tf.int64)]))
                    records = read(tf.data.Dataset.from_tensor_slices(order).shard(world, rank))
                    records = records.shuffle(4 * batch_size, seed=tf.constant(seed, tf.int64) * 1_000_003 + e)
                    records = records.take(-1 if quota is None else quota)
                    return records.enumerate().map(lambda position, record: (e, position, record))

                turns = tf.data.experimental.Counter(epoch) if epochs is None else \
                    tf.data.Dataset.range(epoch, epoch + epochs)
                records = turns.flat_map(epoch_records)
            else:
                files = tf.data.Dataset.from_tensor_slices(part.shards).shard(world, rank)
                records = read(files).enumerate().map(lambda position, record: (tf.constant(epoch, tf.int64),
                                                                                 position, record))

            offset, classes = dataset.label_offset, dataset.classes
            outside = (f"{dataset.root} holds a TFRecord label outside {offset}..{offset + classes - 1} (its "
                       f"{classes} classes from label_offset {offset}; meta.json gives the label of the first class)")

            def parse(e, position, record):  # no sample index in a stream of records: its place in the epoch
                ex = tf.io.parse_single_example(record, spec)
                crop, flip = keys(e, position)
                # a label outside the classes is refused, never trained on: Keras's loss gives NaN for it on a GPU
                label = ex["image/class/label"] - offset
                inside = tf.logical_and(label >= 0, label < classes)
                with tf.control_dependencies([tf.debugging.Assert(inside, [outside])]):
                    label = tf.identity(label)
                return finish(crop_decode(ex["image/encoded"], crop), label, flip)

            ds = records.map(parse, num_parallel_calls=parallel)
        else:
            n = len(part)
            if train:
                per_rank = len(shard(n, 0, world, batch_size, seed, epoch))  # one line when the split is too small
            if not train:  # the held-out split: the rank's part, once, in order (datasets.held_out)
                indices = tf.data.Dataset.range(n).shard(world, rank).map(lambda i: (i, tf.constant(0, tf.int64)))
            elif graph_only:
                def epoch_order(e):
                    mixed = tf.constant(seed, tf.int64) * 1_000_003 + e
                    return (tf.data.Dataset.range(n).shard(world, rank)
                            .shuffle(n // world + 1, seed=mixed, reshuffle_each_iteration=False)
                            .take(per_rank).map(lambda i: (i, e)))

                turns = tf.data.experimental.Counter(epoch) if epochs is None else \
                    tf.data.Dataset.range(epoch, epoch + epochs)
                indices = turns.flat_map(epoch_order)
            else:
                # one Python call per epoch (its whole shard as a tensor), not one per sample: from_generator's
                # per-element call cost a third of a one-thread pipeline's rate
                def epoch_shard(e):
                    order = tf.numpy_function(lambda e_: shard(n, rank, world, batch_size, seed, int(e_)).astype(
                        np.int64), [e], tf.int64, stateful=False)
                    return tf.data.Dataset.from_tensor_slices(tf.reshape(order, [per_rank])).map(lambda i: (i, e))

                turns = tf.data.experimental.Counter(epoch) if epochs is None else \
                    tf.data.Dataset.range(epoch, epoch + epochs)
                indices = turns.flat_map(epoch_shard)
            labels = tf.constant(part.labels)
            if part.tokens is not None:
                ds = token_windows(tf, indices, part, dataset.classes, parallel, graph_only)
            elif part.paths is not None:
                paths = tf.constant(part.paths)

                def decode(i, e):
                    crop, flip = keys(e, i)
                    return finish(crop_decode(tf.io.read_file(paths[i]), crop), labels[i], flip)

                ds = indices.map(decode, num_parallel_calls=parallel)
            else:
                arrays = tf.constant(part.arrays)

                def small(i, e):  # CIFAR-size: pad 4, random crop, flip
                    crop, flip = keys(e, i)
                    image = arrays[i]
                    if train:
                        image = tf.image.stateless_random_crop(tf.pad(image, [[4, 4], [4, 4], [0, 0]]), [32, 32, 3],
                                                               seed=crop)
                    image = pixels(tf.image.resize(image, [size, size])) if size != 32 else image
                    return finish(image, labels[i], flip)

                ds = indices.map(small, num_parallel_calls=parallel)
        ds = ds.batch(batch_size, drop_remainder=train).prefetch(tf.data.AUTOTUNE)
        if workers:
            options = tf.data.Options()
            options.threading.private_threadpool_size = workers
            ds = ds.with_options(options)
        return ds


def token_windows(tf, indices, part: Split, vocab: int, parallel, graph_only: bool):
    """A token split's samples in the order of ``indices`` ((i, epoch) pairs), each read from its file where
    it is, so that no rank holds the corpus in memory (a 20 GB file of uint16 ids was 40 GB of int32 per rank as
    one constant): cut from the memory-mapped file by :meth:`bench.data.split.Split.sample` (as the torch
    loader cuts them), 64 samples a call; or, where no Python may run in the pipeline (``graph_only``), sample i
    (2 L tokens and one more) read as the one record of a FixedLengthRecordDataset whose header is everything
    before it and whose footer everything after. Either way a window's ids are checked against the vocabulary as
    it is read, instead of a scan of the whole file when it is opened."""
    length = part.seq_len
    if len(part) == 0:  # an empty held-out split: nothing to read
        return indices.map(lambda i, e: (tf.zeros([2, length], tf.int32), tf.zeros([length], tf.int32)))
    path, item = part.tokens.filename, part.tokens.dtype.itemsize
    size, record = Path(path).stat().st_size, (2 * length + 1) * item
    raw = tf.uint16 if item == 2 else tf.int32  # decode_raw has no uint32; ids below 2**31 read the same as int32
    outside = f"{path} holds a token id outside the vocabulary 0..{vocab - 1}"

    def read(i, e):
        head = 2 * length * item * i
        return tf.data.FixedLengthRecordDataset(path, record, header_bytes=head, footer_bytes=size - head - record)

    def window(data):
        w = tf.cast(tf.io.decode_raw(data, raw, little_endian=True), tf.int32)
        with tf.control_dependencies([tf.debugging.Assert(tf.reduce_max(w) < vocab, [outside])]):
            w = tf.identity(w)
        return tf.stack([w[:length], w[length:2 * length]]), w[length + 1:]

    if not graph_only:  # Python may run in the pipeline: the memory-mapped file cut in numpy, 64 samples a call
        def samples(chunk):
            pairs, targets = zip(*(part.sample(int(i)) for i in chunk), strict=True)
            return np.stack(pairs).astype(np.int32), np.stack(targets).astype(np.int32)

        def cut(chunk, e):
            pair, target = tf.numpy_function(samples, [chunk], [tf.int32, tf.int32], stateful=False)
            return tf.reshape(pair, [-1, 2, length]), tf.reshape(target, [-1, length])
        return indices.batch(64).map(cut, num_parallel_calls=parallel).unbatch()
    # one record per index: the interleave keeps the indices' order (deterministic), reading several at once
    windows = indices.interleave(read, cycle_length=8, num_parallel_calls=parallel, deterministic=True)
    return windows.map(window, num_parallel_calls=parallel)


class DaliLoader(Loader):
    """NVIDIA DALI for either framework: each epoch a pipeline reads this rank's shard of that epoch, the same
    samples in the same order as the torch and tf loaders (bench.data.datasets.shard: the whole split shuffled by
    (seed, epoch), positions r, r + W, ... cut to whole batches), so an epoch is a global shuffle and the ranks'
    shards are disjoint and equal; ``decoders.image_random_crop`` decodes only the crop (on the CPU; on a GPU the
    "mixed" decoder, nvJPEG, with the rank's GPU), resized to the run's size, flipped half the time and normalised
    by ``crop_mirror_normalize``, in NCHW for PyTorch and NHWC for TensorFlow. ``workers`` is DALI's thread count.
    On a GPU a PyTorch run gets the batch as a CUDA tensor on the rank's GPU, copied there from DALI's output
    (device to device, on the current stream), with no trip through the host. The next epoch's pipeline is
    built in a helper thread while this one trains, and starts on its first batches as this one's last are handed
    over (PREFETCH), so an epoch boundary costs no build and no cold start inside a timed window; a finished
    epoch's pipeline is torn down in that thread too. ImageNet folders only (DALI's TFRecord reader wants index
    files; CIFAR is in memory)."""
    name = "dali"
    framework = "any"
    reads = ("files",)
    requires = "nvidia.dali"
    exact_held_out = False  # its reader pads the last batch
    decodes_on_gpu = True  # nvJPEG, DALI's "mixed" decoder

    def batches(self, dataset: Dataset, split: str, size: int, batch_size: int, workers: int, seed: int,
                rank: int = 0, world: int = 1, epoch: int = 0, device: str = "cpu", epochs: int | None = 1,
                framework: str | None = None, device_id: int | None = None) -> Iterator[tuple[Any, Any]]:
        from nvidia.dali import fn, pipeline_def, types

        self.check_reads(dataset)
        part = dataset.splits[split]
        train = split == "train"
        gpu = device == "cuda" and device_id is not None

        def pipeline_of(e: int):
            """Epoch ``e``'s pipeline over this rank's samples of it, in their order, and its batches."""
            indices = shard(len(part), rank, world, batch_size, seed, e) if train else held_out(len(part), rank,
                                                                                                  world)

            @pipeline_def(batch_size=batch_size, num_threads=max(1, workers), device_id=device_id if gpu else None,
                          seed=seed + e, prefetch_queue_depth=PREFETCH)
            def pipeline():
                encoded, labels = fn.readers.file(files=[str(part.paths[i]) for i in indices],
                                                  labels=[int(part.labels[i]) for i in indices],
                                                  random_shuffle=False, name="reader")
                if train:
                    images = fn.decoders.image_random_crop(encoded, device="mixed" if gpu else "cpu",
                                                           output_type=types.RGB, random_area=list(SCALE),
                                                           random_aspect_ratio=list(RATIO), num_attempts=10)
                else:
                    images = fn.decoders.image(encoded, device="mixed" if gpu else "cpu", output_type=types.RGB)
                    images = fn.resize(images, resize_shorter=round(size / 0.875))
                images = fn.resize(images, resize_x=size, resize_y=size) if train else images
                images = fn.crop_mirror_normalize(
                    images, dtype=types.FLOAT, output_layout="HWC" if framework == "tensorflow" else "CHW",
                    crop=(size, size), mean=list(MEAN * 255), std=list(STD * 255),
                    mirror=fn.random.coin_flip() if train else 0)
                return images, labels

            pipe = pipeline()
            pipe.build()
            return pipe, len(indices) // batch_size

        def handed_over(images, labels):
            labels = labels.as_array().reshape(-1).astype(np.int64)
            if gpu and framework == "torch":  # a CUDA tensor on the rank's GPU: no host copy
                import torch
                from nvidia.dali.plugin.pytorch import feed_ndarray

                dense = images.as_tensor()
                out = torch.empty(dense.shape(), dtype=torch.float32, device=torch.device("cuda", device_id))
                feed_ndarray(dense, out, cuda_stream=torch.cuda.current_stream(out.device))
                return out, torch.from_numpy(labels)
            return _framework_batch((images.as_cpu() if gpu else images).as_array(), labels, framework)

        def dropped(pipe) -> None:  # the helper thread holds the last reference: DALI's threads join there
            del pipe

        last = None if epochs is None else epoch + epochs
        with ThreadPoolExecutor(1, thread_name_prefix="dali-next-epoch") as helper:
            upcoming = helper.submit(pipeline_of, epoch)
            e = epoch
            pipe, per_epoch = upcoming.result()
            pipe.schedule_run()  # its first PREFETCH batches
            while last is None or e < last:
                upcoming = helper.submit(pipeline_of, e + 1) if last is None or e + 1 < last else None
                following = None
                for i in range(per_epoch):
                    try:
                        images, labels = pipe.outputs()
                        if i + PREFETCH < per_epoch:
                            pipe.schedule_run()  # one more of this epoch: PREFETCH in flight, none past its end
                        elif upcoming is not None and following is None:  # the next epoch's first ones begin
                            following = upcoming.result()
                            following[0].schedule_run()
                    except RuntimeError as exc:
                        raise BenchError(f"the dali pipeline failed: {readable_dali(exc)}") from None
                    yield handed_over(images, labels)
                if upcoming is None:
                    break
                if following is None:  # an epoch shorter than the prefetch
                    following = upcoming.result()
                    following[0].schedule_run()
                helper.submit(dropped, pipe)
                pipe, per_epoch = following
                e += 1


def readable_dali(exc: Exception) -> str:
    """DALI's error as one line: its first line that names the problem (a file it could not decode, say)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    named = [line for line in lines if "rror" in line or "decode" in line.lower()]
    return (named or lines or ["no reason given"])[-1][:400]


def _framework_batch(images: np.ndarray, labels: np.ndarray, framework: str | None):
    """DALI's arrays as the framework's tensors (host memory: the trainer copies them to its device)."""
    if framework == "tensorflow":
        tf, _ = import_tf()
        return tf.convert_to_tensor(images), tf.convert_to_tensor(labels)
    import torch

    return torch.from_numpy(images), torch.from_numpy(labels)


LOADERS: dict[str, Loader] = {}


def register(pipeline: Loader) -> Loader:
    """Add a loader (``--loader NAME`` then names it everywhere); another package does this from a plugin
    (bench.plugins)."""
    LOADERS[pipeline.name] = pipeline
    return pipeline


def installed() -> tuple[str, ...]:
    """The loaders this machine can run: those whose extra module is importable (DALI only where nvidia-dali is
    installed: the dali extra, the GPU machines' images); the others always (their framework's environment runs
    them)."""
    import importlib.util

    def found(module: str | None) -> bool:
        try:
            return module is None or importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # no parent package at all (no nvidia namespace)
            return False

    return tuple(name for name, x in LOADERS.items() if found(x.requires))


def default_loader(framework: str) -> str:
    """The input pipeline a mode of ``framework`` reads --data through unless told: the first loader of that
    framework (torch's DataLoader, TensorFlow's tf.data)."""
    return next(name for name, x in LOADERS.items() if x.framework == framework)


def loader(name: str) -> Loader:
    if name not in LOADERS:
        raise BenchError(f"unknown --loader '{name}' (choose from: {', '.join(LOADERS)})")
    return LOADERS[name]


for _loader in (TorchLoader(), TFLoader(), DaliLoader()):
    register(_loader)
