"""Each of bench's loaders against a plain pipeline of the field doing the same work on the same files, one core
each: the `torch` loader against a plain Pillow DataLoader (torchvision's ImageFolder, RandomResizedCrop and
RandomHorizontalFlip written out: open, convert, crop then resize, flip, uint8 CHW, as the field's PyTorch
ImageNet pipelines ship it for the GPU to normalise), the `tf` loader against TensorFlow's own ImageNet training
preprocessing (tf.data from the file names: shuffle, read, sample_distorted_bounding_box, decode_and_crop_jpeg,
bilinear resize, random flip, batch, prefetch; no normalisation: both loaders hand uint8 pixels to the trainer,
which normalises each batch on the device). Each loader twice: read in this process ("ours"), and through
`bench data bench` as users run it ("bench": its own clock, its loader in a child process, pinned alike).

    python -m tools.benchmarks.loaders_vs_plain [--loaders torch,tf] [--repeats 3] [--images 1024]
                                                [--image-size 224] [--batch-size 32] [--batches 90] [--data DIR]
                                                [--cpu N]

One core each: one DataLoader worker, or tf.data held to one thread (its private thread pool and intra-op
parallelism), and each run's process (its workers with it) pinned to one CPU (--cpu, default the last this process
may use): unpinned, a one-thread tf.data pipeline's rate swung between 320 and 500 img/s from run to run on this
2-core machine as the scheduler moved its threads, which no ratio survives. Each pipeline runs in a process of its
own (a TensorFlow process never loads PyTorch), the pairs alternated over --repeats rounds; per run, the images of
--batches batches after 4 untimed ones (the prefetched queue is full at the clock's start in both, so the ratio
holds it alike). The table gives the medians, ours / plain and bench / plain: the issue's bar is 0.95.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.records import store
from bench.records.kinds import DataBench
from tools.benchmarks.data_bench_check import rate_after, run_bench

UNTIMED = 4
WHICH = ("ours", "bench", "plain")  # alternated in this order, then reversed


def timed(batches, count: int) -> float:
    """Images per second over ``count`` batches after UNTIMED untimed ones."""
    rate, read = rate_after(batches, UNTIMED, count)
    if rate is not None:
        return rate
    raise SystemExit(f"loaders_vs_plain: the pipeline ended after {read} batches; it needs {UNTIMED + count}")


def ours(name: str, a) -> float:
    from bench.data import datasets
    from bench.data.loaders import loader

    dataset = datasets.load(a.data)
    return timed(loader(name).batches(dataset, "train", a.image_size, a.batch_size, 1, 0, epochs=None), a.batches)


class PlainImages:
    """torchvision.datasets.ImageFolder with RandomResizedCrop(size) and RandomHorizontalFlip, written out in
    Pillow (the CPU venv cannot load PyPI's torchvision): the same crop algorithm as the torch loader's."""

    def __init__(self, paths: list[str], labels, size: int) -> None:
        self.paths, self.labels, self.size = paths, labels, size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        import random

        import numpy as np
        import torch
        from PIL import Image

        from bench.data.loaders import crop_box

        with open(self.paths[i], "rb") as f:
            im = Image.open(f).convert("RGB")
        left, top, w, h = crop_box(np.random.default_rng(random.getrandbits(32)), *im.size)
        im = im.crop((left, top, left + w, top + h)).resize((self.size, self.size), Image.BILINEAR)
        if random.random() < 0.5:
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.asarray(im, dtype=np.uint8).transpose(2, 0, 1).copy()), int(self.labels[i])


def plain_torch(a) -> float:
    import torch

    from bench.data import datasets

    train = datasets.load(a.data).train
    images = PlainImages(list(train.paths), train.labels, a.image_size)
    sampler = torch.utils.data.RandomSampler(images, replacement=False, num_samples=10 ** 9)
    loader = torch.utils.data.DataLoader(images, batch_size=a.batch_size, sampler=sampler, num_workers=1,
                                         prefetch_factor=2, drop_last=True)
    return timed(iter(loader), a.batches)


def plain_tf(a) -> float:
    import numpy as np

    from bench.data import datasets
    from bench.tfutil import import_tf

    tf, _ = import_tf()
    train = datasets.load(a.data).train
    size = a.image_size

    def parse(path, label):
        encoded = tf.io.read_file(path)
        shape = tf.io.extract_jpeg_shape(encoded)
        begin, box, _ = tf.image.sample_distorted_bounding_box(
            shape, tf.zeros([1, 0, 4]), min_object_covered=0.0, aspect_ratio_range=[3 / 4, 4 / 3],
            area_range=[0.08, 1.0], max_attempts=10, use_image_if_no_bounding_boxes=True)
        window = tf.stack([begin[0], begin[1], box[0], box[1]])
        image = tf.io.decode_and_crop_jpeg(encoded, window, channels=3)
        image = tf.image.resize(image, [size, size], method="bilinear")
        image = tf.image.random_flip_left_right(image)
        return image, label

    ds = (tf.data.Dataset.from_tensor_slices((list(train.paths), np.asarray(train.labels)))
          .shuffle(len(train.paths), reshuffle_each_iteration=True).repeat()
          .map(parse, num_parallel_calls=1).batch(a.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE))
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    return timed(iter(ds.with_options(options)), a.batches)


PIPELINES = {("torch", "ours"): lambda a: ours("torch", a), ("torch", "plain"): plain_torch,
             ("tf", "ours"): lambda a: ours("tf", a), ("tf", "plain"): plain_tf}


def through_bench(a, loader: str) -> float:
    """`bench data bench` on one worker, pinned to --cpu (its loader's child process inherits the pin): its img/s,
    from the data-bench record it writes."""
    with tempfile.TemporaryDirectory(prefix="hvdbench-loaders-vs-plain-bench-") as out:
        proc = subprocess.run([sys.executable, "-m", "bench", "data", "bench", a.data, "--loaders", loader, "--workers",
                               "1", "--image-size", str(a.image_size), "--batch-size", str(a.batch_size),
                               "--warmup", str(UNTIMED), "--batches", str(a.batches), "--repeats", "1", "--output",
                               out], capture_output=True, text=True,
                              preexec_fn=lambda: os.sched_setaffinity(0, {a.cpu}))
        if proc.returncode != 0:
            raise SystemExit(f"loaders_vs_plain: bench data bench --loaders {loader} failed: "
                             f"{proc.stderr.strip().splitlines()[-1:]}")
        return store.load(next(Path(out).glob("*.json")), DataBench).rows[0].images_per_sec


def one(a, loader: str, which: str) -> float:
    """One run in a process of its own: its img/s."""
    if which == "bench":
        return through_bench(a, loader)
    proc = subprocess.run([sys.executable, "-m", "tools.benchmarks.loaders_vs_plain", "--one", f"{loader}:{which}",
                           "--cpu", str(a.cpu), "--data", a.data, "--image-size", str(a.image_size), "--batch-size",
                           str(a.batch_size), "--batches", str(a.batches)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"loaders_vs_plain: {loader} {which} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["images_per_sec"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loaders", default="torch,tf")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--images", type=int, default=1024)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--batches", type=int, default=90)
    p.add_argument("--data", help="a dataset folder of JPEGs (default: bench data make writes one here)")
    p.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)),
                   help="the CPU each run is pinned to (default: the last this process may use)")
    p.add_argument("--one", help=argparse.SUPPRESS)  # LOADER:ours|plain, one run in this process
    a = p.parse_args()
    if a.cpu not in os.sched_getaffinity(0):
        raise SystemExit(f"loaders_vs_plain: --cpu {a.cpu} is not one this process may run on "
                         f"({sorted(os.sched_getaffinity(0))})")
    if a.one:
        os.sched_setaffinity(0, {a.cpu})  # before TensorFlow or PyTorch start a thread: every thread inherits it
        loader, which = a.one.split(":")
        rate = PIPELINES[(loader, which)](a)
        print(json.dumps({"images_per_sec": rate}))
        return
    with tempfile.TemporaryDirectory(prefix="hvdbench-loaders-vs-plain-") as work:
        if not a.data:
            a.data = str(Path(work) / "jpegs")
            run_bench("loaders_vs_plain", "data", "make", a.data, "--images", str(a.images))
        loaders = a.loaders.split(",")
        found = {(n, w): [] for n in loaders for w in WHICH}
        for r in range(a.repeats):
            for name in loaders:
                for which in (WHICH if r % 2 == 0 else WHICH[::-1]):
                    found[(name, which)].append(one(a, name, which))
                print(f"round {r + 1}: {name}: " + ", ".join(f"{w} {found[(name, w)][-1]:.1f}" for w in WHICH)
                      + " img/s", file=sys.stderr, flush=True)
    table = Table("loader", "ours img/s", "bench img/s", "plain img/s", "ours / plain", "bench / plain",
                  "rounds (ours:bench:plain)",
                  title=f"one core each (CPU {a.cpu}), {a.image_size} px crops, batch {a.batch_size}, {a.batches} "
                        f"timed batches, median of {a.repeats} alternated")
    for name in loaders:
        mine, bench, plain = (statistics.median(found[(name, w)]) for w in WHICH)
        table.add_row(name, f"{mine:.1f}", f"{bench:.1f}", f"{plain:.1f}", f"{mine / plain:.3f}",
                      f"{bench / plain:.3f}",
                      " / ".join(":".join(f"{x:.0f}" for x in xs) for xs in zip(*(found[(name, w)] for w in WHICH),
                                                                                 strict=True)))
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
