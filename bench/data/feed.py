"""A training rank's batches from ``--data``: its shard of the training split through the run's input pipeline
(bench.data.loaders), each draw timed, and the ``input`` section of the result built from every rank's timings.

Per step, on each rank (raw values kept, one per timed step)::

    wait_s  from the step asking for its batch (the end of the previous step) to the batch handed to the step,
            on the host's clock: the time the host was held up by the input pipeline. On a GPU the copy to the
            device is only queued in it (PyTorch: on a side stream, which the step's kernels wait for on the
            device): it overlaps the previous step's kernels, as in a production loop, and no synchronisation
            per step adds to what is measured
    h2d_s   the copy to the device (PyTorch on a GPU: its time on the device's clock, between two CUDA events around
            it, read after each timed window, outside its clock); None where there is no copy: on a CPU, or under
            TensorFlow, which copies inside its compiled step)
    idle_s  PyTorch on a GPU: the time the device sat idle for the batch, on the device's clock (an event on the
            compute stream when the step asks, one when the batch is handed to it: bench.modes.torch_common.
            DeviceIdle), read after each timed window; None elsewhere. Without a sync per step the host runs ahead
            of the device, so its wait_s overlaps queued kernels: the host can wait for most of each step while
            the device, busy with the previous one, loses little. On a GPU the input's cost is idle_s; the host's
            wait stays as its own figure

Per rank, over the timed windows: ``wait_share = sum(wait_s) / sum(window times)``, the share of the rank's timed
time its steps waited for data, and on a GPU ``idle_share = sum(idle_s) / sum(window times)``. A rank whose input
share (``idle_share`` on a GPU, ``wait_share`` elsewhere) is at least ``PACE_SHARE`` is named as the one whose
input sets the pace (the largest share when several are). ``loader_rate`` is the pipeline's own rate on that rank,
measured at set-up before any step with the model idle: batches drawn back to back, ``PROBE_BATCHES`` of them and
for ``PROBE_S`` seconds at least, after the first ``prefetch + 1`` (the ones the workers made while the rank waited
for the first), the clock read on a GPU once the device has run what the batches queued on it (DALI hands them over
on the device); every rank probes at the same time, so it is the rate each rank's pipeline gets while the node's
other ranks read too.

The timed windows start with the pipeline's queue in its steady state. Its workers fill it while the rank sets up
and warms up, so a pipeline slower than training would hand the first timed steps batches made before the clock
started (with 100 timed steps and 2 batches ahead per worker, about +37% on the headline at 10 workers). After the
warm-up steps, every rank steps on, untimed, until each rank's queue is empty (the pipeline sets the pace) or has
not drained over its last ``depth`` steps (the pipeline keeps up: its queue holds steady, full or nearly), at most
``SETTLE_DEPTHS`` times the queue's depth. A full queue alone proves nothing: it is what a slow pipeline leaves
after set-up. The result keeps per rank the batches ready when the clock started (``queue_at_start``), the queue's
depth and the steps this took (``settle_steps``). Only the torch loader's queue can be read: the tf and DALI
pipelines have no settling (their ``queue_at_start`` is None). A run that trains to a goal (``--epochs``) does not
settle either: every step it takes trains one of its epochs (bench.measure.goal), whose time includes what the
pipeline cost it.

Epochs: one pipeline reads epoch after epoch (its workers kept), each with its own shuffle (seed, epoch); every
rank has the same number of batches per epoch (bench.data.datasets.shard), so ranks turn the epoch at the same
step, and no epoch turn restarts a pipeline inside the timed windows.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import Field

from bench.data import datasets
from bench.data.loaders import default_loader
from bench.data.loaders import loader as loader_named
from bench.errors import BenchError
from bench.launching.supervise import cpu_thread_share
from bench.measure.tracker import Ranks, Tracker, register
from bench.typed import Open

if TYPE_CHECKING:
    from bench.measure.raw import RankRecord


class InputRank(Open):
    """One rank's input pipeline over the timed windows (a tf-native ps worker's: rank and host null, worker set)."""
    rank: int | None
    host: str | None
    worker: int | None = None
    wait_s: float | None = None
    h2d_s: float | None = None
    wait_share: float | None = None
    wait_step_ms_median: float | None = None
    loader_rate: float | None = None
    workers: int | None = None
    queue_at_start: int | None = None
    queue_depth: int | None = None
    settle_steps: int = 0
    epochs: float | None = Field(None, description="the epochs of the split the run's steps covered")
    wait_step_s: list[float] = []
    h2d_step_s: list[float] | None = None
    idle_s: float | None = Field(None, description="PyTorch on a GPU: the device's idle for its batches")
    idle_share: float | None = None
    idle_step_s: list[float] | None = None

    @property
    def input_share(self) -> float | None:
        """The input's cost as a share of the timed windows: the device's idle on a GPU (PyTorch), where the host's
        wait overlaps queued kernels; the host's wait elsewhere (bench.data.feed)."""
        return self.idle_share if self.idle_share is not None else self.wait_share


class Input(Open):
    """What the run trained on (bench.data.feed): one synthetic batch, or a dataset through an input pipeline with
    each rank's data wait."""
    source: Literal["synthetic", "dataset"]
    path: str | None = None
    format: str | None = None
    loader: str | None = None
    classes: int | None = None
    train_samples: int | None = None
    workers: list[int] = []
    per_rank: list[InputRank] = []
    wait_share_max: float | None = None
    idle_share_max: float | None = None
    paced_by_rank: int | None = None
    paced_by_worker: int | None = None
    pace_share: float | None = None
    settle_steps: int = 0
    definition: str

    @property
    def pacer(self) -> str | None:
        """Whose input pipeline sets the pace: "rank R", "worker W" (tf-native ps), or None."""
        if self.paced_by_worker is not None:
            return f"worker {self.paced_by_worker}"
        return None if self.paced_by_rank is None else f"rank {self.paced_by_rank}"

PACE_SHARE = 0.10
SETTLE_DEPTHS = 4
# A queue still draining when the settling gave up, holding more than this share of the timed steps, warns
QUEUE_WARN_SHARE = 0.10
PROBE_BATCHES = 3
PROBE_S = 0.5  # and at least this long: a rate over a few milliseconds is noise (a CPU quota's period is 100 ms)


def default_workers(local_world_size: int) -> int:
    """Loader workers per rank by default: the rank's share of the cores this process may use, less one for the
    rank itself (its step, its exchange), at least one."""
    return max(1, cpu_thread_share(local_world_size) - 1)


def check(cfg) -> dict[str, Any]:
    """The parent's checks of a resolved ``--data`` run, before any rank starts (one line each): the dataset
    loads, its labels fit the classifier, and its training split gives every rank at least one whole batch."""
    ds = datasets.load(cfg.data, cfg.seq_len)
    if ds.classes > cfg.num_classes:
        raise BenchError(f"--data {cfg.data} has {ds.classes} classes; --num-classes {cfg.num_classes} is fewer")
    train = ds.train
    if len(train) or train.shards:
        datasets.rank_samples(train, cfg.np, cfg.batch_size)
    val = ds.val
    if getattr(cfg, "epochs", None) is not None and not len(val) and not val.shards:
        raise BenchError(f"--epochs evaluates on the held-out split; {cfg.data} has none (val/<class>/, CIFAR's "
                         "test_batch, or validation-* TFRecord shards)")
    return {"format": ds.format, "classes": ds.classes, "train_samples": len(train)}


def readable(text: str) -> str:
    """A pipeline's error as one line: this project's own error where the text holds one (a DataLoader worker's
    re-raised error and a tf.data Python function's carry a traceback after or around it), a tf.data
    assertion's message (bench.data.loaders.token_windows), else the text's last line."""
    text = str(text)
    said = re.findall(r"BenchError: ([^\n]+)", text) or re.findall(r"assertion failed: \[([^\]\n]+)\]", text)
    if said:
        return said[-1].strip()
    last = [line for line in text.strip().splitlines() if line.strip()]
    return last[-1] if last else text


@dataclass(frozen=True)
class WorkerWaits:
    """tf-native ps: one worker's waits for its batches, per closure it ran in the timed windows."""
    worker: int
    wait_step_s: list[float]
    h2d_step_s: None = None  # the workers' batches stay on them: no copy from the coordinator


@dataclass(frozen=True)
class FeedRecord:
    """One rank's input pipeline over the timed windows (its part, bench.data.feed.FeedTracker)."""
    wait_step_s: list[float]  # per timed step, the wait for its batch
    h2d_step_s: list[float] | None  # per timed step, the copy to the device (None: no copy timed)
    loader_rate: float | None  # the pipeline alone at set-up, samples/s
    workers: int
    queue_at_start: int | None  # batches ready when the clock started
    queue_depth: int | None
    settle_steps: int
    epochs: float | None  # the epochs of the split the rank's steps covered
    format: str
    classes: int
    train_samples: int
    per_worker: list[WorkerWaits] | None = None  # tf-native ps's coordinator: each worker's waits
    idle_step_s: list[float] | None = None  # per timed step, the device's idle for its batch (None: not on a GPU)


class DeviceClock(Protocol):
    """The device's idle for each batch (bench.modes.torch_common.DeviceIdle): ``asked`` when the step asks for its
    batch, ``handed`` once it is on the device, giving the seconds between the two as a deferred reading; and
    ``synchronize``, for the loader-rate probe's clock (Feed._probe)."""

    def asked(self) -> None: ...

    def handed(self) -> Callable[[], float]: ...

    def synchronize(self) -> None:
        """Until the device has run everything queued on it so far."""


class Feed:
    """One rank's training batches. ``place`` turns a host batch into the step's inputs (the copy to the device);
    ``copies`` says whether that is a copy worth timing apart."""

    def __init__(self, cfg, rank: int, world: int, local_world: int, place: Callable[[Any], Any],
                 copies: bool, framework: str, device_id: int | None = None, draws: bool = True,
                 copy_time: Callable[[], Callable[[], float]] | None = None,
                 device_clock: DeviceClock | None = None) -> None:
        self.cfg, self.rank, self.world = cfg, rank, world
        self.dataset = datasets.load(cfg.data, cfg.seq_len)
        self.loader = loader_named(cfg.loader)
        self.workers = default_workers(local_world) if cfg.loader_workers is None else cfg.loader_workers
        # copy_time: after place, the copy's time as a deferred reading (device events); else the host's clock
        self.place, self.copies, self.copy_time = place, copies, copy_time
        # device_clock: on a GPU, the device's idle for each batch, as deferred readings (module docstring)
        self.device_clock = device_clock
        self.idle_s: list[float | Callable[[], float]] = []
        self._read = 0  # the steps whose deferred readings read_deferred has turned into seconds
        self.framework, self.device_id = framework, device_id  # DALI's output layout and GPU
        self.wait_s: list[float] = []
        self.h2d_s: list[float | Callable[[], float]] = []
        self.queue_at_start: int | None = None
        self.settle_steps = 0
        self.readings: list[int] = []  # the queue's ready batches at each settling check
        per_rank = datasets.rank_samples(self.dataset.train, world, cfg.batch_size)
        self.per_epoch = None if per_rank is None else per_rank // cfg.batch_size  # None: TFRecord without counts
        self.loader_rate = self._probe()
        self._batches = self._open(0, None) if draws else None  # draws=False: the batches are read elsewhere

    def _open(self, epoch: int, epochs: int | None):
        cfg = self.cfg
        return iter(self.loader.batches(self.dataset, "train", cfg.image_size, cfg.batch_size, self.workers,
                                        cfg.seed, self.rank, self.world, epoch, cfg.device.value, epochs,
                                        self.framework, self.device_id))

    def _draw(self, batches):
        try:
            return next(batches)
        except StopIteration:
            raise
        except BenchError as exc:
            raise BenchError(readable(exc)) from None
        except Exception as exc:  # a worker's or tf.data's error: the file it names, in one line
            raise BenchError(f"--data {self.cfg.data}: the input pipeline failed: {readable(exc)}") from None

    def _probe(self) -> float:
        """Samples/s of this rank's pipeline alone (module docstring)."""
        skip = 2 * max(1, self.workers) + 1  # DataLoader prefetches 2 batches per worker
        batches = self._open(1_000_000, None)  # an epoch no training run reaches: its own shuffle
        try:
            for _ in range(skip):
                self._draw(batches)
            t0 = self._device_done()
            n = 0
            while n < PROBE_BATCHES or time.perf_counter() - t0 < PROBE_S:
                self._draw(batches)
                n += 1
            return n * self.cfg.batch_size / (self._device_done() - t0)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def _device_done(self) -> float:
        """The probe's clock, read once the device has run what the pipeline queued on it (on a GPU: DALI hands
        its batches over there, and their copies are only queued), so the probe's span holds its batches' device
        work; on a CPU the host's clock alone."""
        if self.device_clock is not None:
            self.device_clock.synchronize()
        return time.perf_counter()

    def seek(self, batches: int) -> None:
        """Go on after the run's first ``batches`` batches (a resumed run, bench.measure.checkpoint): the pipeline
        reopened at that epoch (its shuffle is the epoch's), the batches of it already trained on drawn and
        dropped."""
        epoch, skip = divmod(batches, self.per_epoch)
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()
        self._batches = self._open(epoch, None)
        for _ in range(skip):
            self._draw(self._batches)

    def depth(self) -> int:
        """How many batches the pipeline's queue holds at most; 0 where it cannot be read (module docstring)."""
        return getattr(self._batches, "depth", 0) if hasattr(self._batches, "ready") else 0

    def ready(self) -> int | None:
        """Batches made ahead and not yet drawn, or None where the pipeline cannot tell."""
        ready = getattr(self._batches, "ready", None)
        return ready() if ready is not None else None

    def steady(self) -> bool:
        """The queue is empty (training waits for the pipeline) or held steady over the last ``depth`` steps (the
        pipeline keeps up); called once per settling step."""
        ready, depth = self.ready(), self.depth()
        if ready is None or depth == 0 or ready == 0:
            return True
        self.readings.append(ready)
        return len(self.readings) > depth and ready >= self.readings[-1 - depth]

    def settle_limit(self) -> int:
        """The most untimed steps the run takes to bring the queue to its steady state (module docstring)."""
        return SETTLE_DEPTHS * self.depth()

    def started(self, settle_steps: int) -> None:
        """The timed windows start now, after ``settle_steps`` untimed steps of settling."""
        self.queue_at_start, self.settle_steps = self.ready(), settle_steps

    def next(self):
        """The step's batch on its device; the wait and the copy timed."""
        t0 = time.perf_counter()
        if self.device_clock is not None:
            self.device_clock.asked()
        host = self._draw(self._batches)
        t1 = time.perf_counter()
        batch = self.place(host)
        t2 = time.perf_counter()
        self.wait_s.append(t2 - t0)
        self.h2d_s.append(self.copy_time() if self.copy_time is not None else t2 - t1)
        if self.device_clock is not None:
            self.idle_s.append(self.device_clock.handed())
        return batch

    def held_out(self):
        """The rank's part of the held-out split, batch by batch on the device (bench.measure.goal): through the
        run's loader, or the framework's own where that is DALI (its reader pads the last batch; scoring wants
        every sample exactly once)."""
        cfg = self.cfg
        pipeline = self.loader if self.loader.exact_held_out else loader_named(default_loader(self.framework))
        batches = pipeline.batches(self.dataset, "val", cfg.image_size, cfg.batch_size, self.workers, cfg.seed,
                                   self.rank, self.world, 0, cfg.device.value, 1, self.framework, self.device_id)
        batches = iter(batches)
        while True:
            try:
                host = self._draw(batches)
            except StopIteration:
                return
            yield self.place(host)

    def mark(self) -> int:
        return len(self.wait_s)

    def read_deferred(self) -> None:
        """The device's readings of the steps so far as seconds: called after a timed window's synchronisation,
        outside its clock, when every event of its steps has passed. Each deferred reading holds CUDA events; a
        long run (a goal run of many epochs) would otherwise keep two or three per step alive to its end."""
        for readings in (self.h2d_s, self.idle_s):
            for i in range(self._read, len(readings)):
                if callable(readings[i]):
                    readings[i] = readings[i]()
        self._read = len(self.wait_s)

    def record(self, timed_from: int) -> FeedRecord:
        """This rank's raw figures from step ``timed_from`` on (the timed windows), for the gather."""
        train = self.dataset.train
        return FeedRecord(
            wait_step_s=self.wait_s[timed_from:],
            h2d_step_s=[x() if callable(x) else x for x in self.h2d_s[timed_from:]] if self.copies else None,
            idle_step_s=[x() if callable(x) else x for x in self.idle_s[timed_from:]]
            if self.device_clock is not None else None,
            loader_rate=self.loader_rate, workers=self.workers, queue_at_start=self.queue_at_start,
            queue_depth=self.depth() or None, settle_steps=self.settle_steps,
            epochs=len(self.wait_s) / self.per_epoch if self.per_epoch else None,
            format=self.dataset.format, classes=self.dataset.classes, train_samples=len(train))


class WorkerFeeds(Feed):
    """tf-native --strategy ps: the workers read the batches, each its own shard through a tf.data pipeline built on
    it (bench.data.loaders.TFLoader.dataset, graph_only), inside the closures the coordinator schedules; this, on
    the coordinator, is their feeds' account. Each closure times its own wait for its batch (``add``: the worker's
    index and the seconds from asking its iterator to holding the batch, read with tf.timestamp inside the
    closure), and the loader's rate is probed here on worker 0's shard; the workers score the held-out split too,
    one part each in closures of their own (bench.modes.tf_native.ParameterServerTrainer.evaluate_shard). An epoch
    is ``per_epoch`` steps of one closure per worker (``per_epoch`` = a worker's whole batches); the coordinator
    hands closures to whichever worker is free, so a worker that runs more of them reads on into its own next
    epoch (asynchronous training)."""

    def __init__(self, cfg, workers: int, reopen: Callable[[], None]) -> None:
        super().__init__(cfg, 0, workers, workers, lambda b: b, copies=False, framework="tensorflow", draws=False)
        self.worker_waits: list[tuple[int, float]] = []  # (worker, wait_s) per closure, in the order fetched
        self.start = (0, 0)  # (epoch, batches to skip) where the workers' pipelines begin (seek)
        self.reopen = reopen  # the trainer's: the workers' pipelines made again from self.start

    def add(self, worker: int, wait_s: float) -> None:
        self.worker_waits.append((worker, wait_s))

    def seek(self, batches: int) -> None:
        """A resumed run (bench.measure.checkpoint): the workers' pipelines begin at that epoch, past the batches
        of it already trained on (each worker ran about as many closures: one per step)."""
        self.start = divmod(batches, self.per_epoch)
        self.reopen()

    def mark(self) -> int:
        return len(self.worker_waits)

    def record(self, timed_from: int) -> FeedRecord:
        waits = self.worker_waits[timed_from:]
        per_worker = [WorkerWaits(worker=w, wait_step_s=[s for k, s in waits if k == w]) for w in range(self.world)]
        closures = len(self.worker_waits)
        return dataclasses.replace(super().record(0), wait_step_s=[s for _, s in waits], h2d_step_s=None,
                                   per_worker=per_worker,
                                   epochs=closures / (self.per_epoch * self.world) if self.per_epoch else None)


def section(cfg, ranks: list[RankRecord]) -> Input:
    """The result's ``input`` section from every rank's raw record (module docstring for the formulas)."""
    if not getattr(cfg, "data", None):
        return Input(source="synthetic", definition="one synthetic batch per rank, made once on the device")
    per_rank = []
    fed = [(r, d) for r in ranks if (d := r.parts.get(FeedTracker.name)) is not None]
    for r, d in fed:
        timed = sum(r.window_s)
        # tf-native ps: the coordinator's record holds each worker's waits (WorkerFeeds); each worker is a row, its
        # share over the coordinator's timed windows, through which every worker runs its closures
        parts: list[FeedRecord | WorkerWaits] = list(d.per_worker) if d.per_worker else [d]
        for part in parts:
            waits = part.wait_step_s
            wait = sum(waits)
            who = {"rank": None, "host": None, "worker": part.worker} if isinstance(part, WorkerWaits) else \
                {"rank": r.rank, "host": r.host}
            copies = part.h2d_step_s
            idle = getattr(part, "idle_step_s", None)  # a tf-native ps worker's record has none
            per_rank.append(InputRank(
                **who, wait_s=wait, h2d_s=sum(copies) if copies is not None else None,
                wait_share=wait / timed if timed > 0 else None,
                wait_step_ms_median=1000 * statistics.median(waits) if waits else None,
                idle_s=sum(idle) if idle is not None else None,
                idle_share=sum(idle) / timed if idle is not None and timed > 0 else None,
                loader_rate=d.loader_rate, workers=d.workers, epochs=d.epochs, queue_at_start=d.queue_at_start,
                queue_depth=d.queue_depth, settle_steps=d.settle_steps, wait_step_s=waits, h2d_step_s=copies,
                idle_step_s=idle))
    shares = [(p.wait_share, p) for p in per_rank if p.wait_share is not None]
    top = max(shares, key=lambda s: s[0]) if shares else None
    costs = [(p.input_share, p) for p in per_rank if p.input_share is not None]
    dearest = max(costs, key=lambda s: s[0]) if costs else None
    paced = dearest[1] if dearest and dearest[0] >= PACE_SHARE else None
    idles = [p.idle_share for p in per_rank if p.idle_share is not None]
    first = fed[0][1]
    return Input(
        source="dataset", path=cfg.data, format=first.format, classes=first.classes,
        train_samples=first.train_samples, loader=cfg.loader,
        workers=sorted({p.workers for p in per_rank}),
        per_rank=per_rank,
        wait_share_max=top[0] if top else None,
        idle_share_max=max(idles) if idles else None,
        paced_by_rank=paced.rank if paced else None,
        paced_by_worker=paced.worker if paced else None,  # tf-native ps: a worker's pipeline
        pace_share=PACE_SHARE,
        settle_steps=max(p.settle_steps for p in per_rank) if per_rank else 0,
        definition="wait_s: per timed step, from the step asking for its batch to the batch handed to it, on the "
                   "host's clock (a copy to a GPU is queued in it, not waited for); h2d_s: the copies' time on the "
                   "device's clock (CUDA events), overlapping compute; idle_s (PyTorch on a GPU): per timed step, "
                   "the time the device sat idle for its batch, between CUDA events on the compute stream at the "
                   "ask and at the hand-over (the host's wait overlaps queued kernels there: idle_s is the input's "
                   "cost); wait_share, idle_share: a rank's waits, idles over its timed windows; the pace is judged "
                   "by idle_share where there is one, else wait_share; loader_rate: the pipeline alone at set-up, "
                   "samples/s; queue_at_start: the batches the pipeline had ready when the clock started, after "
                   "settle_steps untimed steps brought its queue (queue_depth at most) to full or empty "
                   "(bench.data.feed)",
    )


def table_rows(section: Input | None) -> list[tuple[str, str, str]]:
    """The terminal table's rows for a result's ``input`` section."""
    if section is None or section.source != "dataset":
        return [("input", "synthetic", "one batch made on the device; --data PATH reads a dataset")]
    ranks = section.per_rank
    rates = [p.loader_rate for p in ranks if p.loader_rate]
    rows = [("input", f"{section.format} via {section.loader}",
             f"{section.path}, {'/'.join(map(str, section.workers))} worker(s) per rank"),
            ("data wait, share of step (max rank)", f"{100 * (section.wait_share_max or 0):.1f}",
             f"%; median step wait {statistics.median(p.wait_step_ms_median or 0 for p in ranks):.1f} ms"
             + (" on the host's clock, overlapping queued kernels" if section.idle_share_max is not None else ""))]
    if section.idle_share_max is not None:
        rows.append(("device idle for data, share of step (max rank)", f"{100 * section.idle_share_max:.1f}",
                     "%: the input's cost on the GPU (CUDA events; the pace is judged by it)"))
    copies = [p.h2d_s for p in ranks if p.h2d_s is not None]
    if copies:
        rows.append(("host-to-device copy (max rank)", f"{max(copies):.3f}", "s over the timed windows"))
    if rates:
        rows.append(("loader alone, per rank (min)", f"{min(rates):.1f}", "samples/s at set-up"))
    queues = [p for p in ranks if p.queue_at_start is not None and p.queue_depth]
    if queues:
        ready = "/".join(sorted({str(p.queue_at_start) for p in queues}))
        rows.append(("input queue when timing started", f"{ready} of {queues[0].queue_depth}",
                     f"batches ready, after {section.settle_steps} untimed step(s) to full or empty"))
    rows.append(("input sets the pace", section.pacer or "no",
                 f"a rank waiting >= {section.pace_share or PACE_SHARE:.0%} of its step for data"))
    return rows


def queue_warning(section: Input | None, timed_steps: int) -> str | None:
    """One line when some rank's queue had not settled when the clock started (the settling stopped at its limit,
    SETTLE_DEPTHS x its depth: neither empty nor steady) and held more batches than QUEUE_WARN_SHARE of the
    ``timed_steps`` each rank took: batches made before the clock are counted inside it, so a pipeline a little
    slower than training reads up to that share high (the module docstring); else None."""
    if section is None or section.source != "dataset" or timed_steps <= 0:
        return None
    unsettled = [p for p in section.per_rank if p.queue_at_start and p.queue_depth
                 and p.settle_steps >= SETTLE_DEPTHS * p.queue_depth]
    worst = max(unsettled, key=lambda p: p.queue_at_start or 0, default=None)
    if worst is None or worst.queue_at_start <= QUEUE_WARN_SHARE * timed_steps:
        return None
    return (f"warning: rank {worst.rank}'s input queue still held {worst.queue_at_start} of its {worst.queue_depth} "
            f"batches after {worst.settle_steps} settling steps, {worst.queue_at_start / timed_steps:.0%} of the "
            f"{timed_steps} timed steps: made before the clock started, they are counted inside it, so a loader "
            "slower than training reads up to that share high; more timed steps (--windows, --steps-per-window) or "
            "fewer --loader-workers shrink it (docs/data.md)")


def settled_steps(ranks: list[RankRecord]) -> int:
    """The untimed settling steps every rank took before the clock started (they agree on stopping)."""
    data = ranks[0].parts.get(FeedTracker.name)
    return data.settle_steps if data is not None else 0


@register
class FeedTracker(Tracker):
    """--data: every draw of the rank's batches timed (the feed's own clock), from the step the windows start at;
    the deferred device readings read after each window, outside its clock. The settling steps before the windows
    are the loop's (bench.measure.loop): they decide when the clock starts."""
    name = field = "input"
    model = Input

    @classmethod
    def wanted(cls, ctx) -> bool:
        return getattr(ctx.trainer, "feed", None) is not None

    def before_windows(self) -> None:
        self.feed = self.ctx.trainer.feed
        self.timed_from = self.feed.mark()

    def after_window(self) -> None:
        self.feed.read_deferred()

    def after_windows(self) -> None:
        self.record = self.feed.record(self.timed_from)

    def part(self) -> FeedRecord:
        return self.record

    @classmethod
    def section(cls, job: Ranks) -> Input:
        return section(job.cfg, job.ranks)

    @classmethod
    def rows(cls, section: Input | None) -> list[tuple[str, str, str]]:
        return table_rows(section)

    @classmethod
    def warning(cls, section: Input | None, result) -> str | None:
        return queue_warning(section, result.config.steps_per_window * len(result.samples.window_s[0])
                             if result.samples.window_s else 0)
