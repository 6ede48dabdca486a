"""--trace N: the framework's own profiler over N training steps, one file per rank next to the result.

The traced steps run after the timed windows and the parameter checksum (as the attribution's do), so no headline
figure, no window and no check of the run carries the profiler's cost; they are the run's own steps (its model,
optimizer, data and exchange), taken right after the windows it measured. Per rank::

    the profiler started -> one step, traced but untimed (the profiler's own start-up: CUPTI's on a GPU)
    -> every rank together, sync -> N steps, each in an "hvdbench.step" range -> sync      traced_s (the span)
    -> the profiler stopped and its file written (outside traced_s)

    traced_step_s   = traced_s / N
    untraced_step_s = the rank's median timed window / steps per window
    cost            = traced_step_s / untraced_step_s - 1      (the share tracing added to a step; the job's is
                                                                the slowest rank's traced step over the job's
                                                                median timed step, minus 1)

The files, relative to the result's folder (``<run_id>.json``); every rank writes under its own ``--output``, so on
several nodes each node's ranks' files are on that node unless ``--output`` is shared:

* PyTorch modes: ``<run_id>.trace/rank<R>.pt.trace.json``, torch.profiler's Chrome trace (CPU ops, and CUDA kernels
  and memory copies on a GPU): open it in Perfetto (ui.perfetto.dev) or chrome://tracing. Each step holds ranges for
  its parts (hvdbench.data, .forward, .backward, .optimizer; DDP's allreduce runs inside backward, Horovod's inside
  the optimizer's step), and on a GPU the same ranges go to NVTX, for Nsight Systems.
* TensorFlow modes: ``<run_id>.trace/rank<R>/``, the TensorFlow profiler's log folder
  (``plugins/profile/<time>/<host>.xplane.pb``): ``tensorboard --logdir`` it with tensorboard-plugin-profile, or xprof.
* Horovod modes, also: ``<run_id>.trace/horovod-timeline.json``, Horovod's timeline of the traced steps (every
  tensor's negotiation and allreduce, written by rank 0; chrome://tracing), unless HOROVOD_TIMELINE was set by the
  user, whose timeline then covers the whole run where they asked for it.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from bench.measure.tracker import Ranks, Tracker, register
from bench.modes import mode

if TYPE_CHECKING:
    from bench.measure.raw import RankRecord


class RankTrace(BaseModel):
    """One rank's traced steps (bench.measure.trace)."""
    model_config = ConfigDict(extra="forbid")
    rank: int
    host: str
    steps: int
    traced_step_s: float
    untraced_step_s: float
    cost: float
    files: list[str] = Field(description="the profiler's files, relative to the result's folder")
    timeline: str | None = Field(description="Horovod's timeline (rank 0 of a Horovod mode), else null")


class Trace(BaseModel):
    """--trace: the framework's profiler over steps after the timed windows, and what it cost (bench.measure.trace)."""
    model_config = ConfigDict(extra="forbid")
    steps: int = Field(description="traced steps per rank")
    folder: str = Field(description="the run's trace folder, relative to the result's folder")
    traced_step_s: float = Field(description="the slowest rank's traced step")
    untraced_step_s: float = Field(description="the job's median timed window / steps per window")
    cost: float = Field(description="traced_step_s / untraced_step_s - 1")
    horovod_timeline: str | None
    per_rank: list[RankTrace]
    definitions: dict[str, str]

TIMELINE = "horovod-timeline.json"

DEFINITIONS = {
    "traced_step_s": "per step while traced: the N traced steps' span (every rank started together, up to its "
                     "device sync) / N",
    "untraced_step_s": "per step in the timed windows: the rank's median window / steps per window",
    "cost": "traced_step_s / untraced_step_s - 1: the share the profiler added to a step (the job's: the slowest "
            "rank's traced step over the job's median timed step)",
    "files": "relative to the result's folder; each rank's under its own --output",
}


def folder(run_id: str) -> str:
    """The run's trace folder, relative to the result's folder."""
    return f"{run_id}.trace"


class TorchProfiler:
    """torch.profiler over the traced steps, with the step's parts as record_function ranges (and NVTX ones on a
    GPU); written as a Chrome trace."""

    def __init__(self, trainer, path: Path) -> None:
        import torch

        self.torch, self.trainer, self.path = torch, trainer, path.with_name(path.name + ".pt.trace.json")
        self.cuda = trainer.device.type == "cuda"
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profile = torch.profiler.profile(activities=activities)

    @contextlib.contextmanager
    def mark(self, name: str):
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.torch.profiler.record_function(f"hvdbench.{name}"))
            if self.cuda:
                stack.enter_context(self.torch.cuda.nvtx.range(f"hvdbench.{name}"))
            yield

    def start(self) -> None:
        self.profile.start()
        self.trainer.mark = self.mark  # TorchTrainer.step's parts

    def step(self, i: int):
        return self.mark("step")

    def stop(self) -> list[Path]:
        self.trainer.mark = contextlib.nullcontext
        self.profile.stop()
        self.profile.export_chrome_trace(str(self.path))
        return [self.path]


class TFProfiler:
    """TensorFlow's profiler over the traced steps, each marked as a step (TensorBoard's step-time view reads it)."""

    def __init__(self, trainer, path: Path) -> None:
        import tensorflow as tf

        self.tf, self.path = tf, path

    def start(self) -> None:
        self.tf.profiler.experimental.start(str(self.path))

    def step(self, i: int):
        return self.tf.profiler.experimental.Trace("hvdbench.step", step_num=i, _r=1)

    def stop(self) -> list[Path]:
        self.tf.profiler.experimental.stop()
        return sorted(self.path.rglob("*.xplane.pb"))


def profiler(framework: str, trainer, path: Path):
    return (TorchProfiler if framework == "torch" else TFProfiler)(trainer, path)


def timeline_wanted(environ=os.environ) -> bool:
    """Whether bench starts and stops Horovod's timeline itself: not when the user set HOROVOD_TIMELINE."""
    return environ.get("HOROVOD_TIMELINE", "DYNAMIC") == "DYNAMIC"


@dataclass(frozen=True)
class Traced:
    """One rank's traced steps (its part, bench.measure.trace.TraceTracker)."""
    steps: int
    traced_step_s: float
    untraced_step_s: float  # the rank's median timed window / steps per window
    files: list[str]  # the profiler's, relative to the result's folder
    timeline: str | None  # Horovod's timeline (rank 0 of a Horovod mode)


def measure(trainer, cfg, framework: str, horovod: bool, run_id: str, window_s: list[float], step, dog) -> Traced:
    """This rank's traced steps (``step``: the trainer's, with any fault hook around it) and its files."""
    out = Path(cfg.output) / folder(run_id)
    out.mkdir(parents=True, exist_ok=True)
    tool = profiler(framework, trainer, out / f"rank{trainer.rank}")
    timeline = horovod and timeline_wanted() and hasattr(trainer, "hvd")
    if timeline:
        trainer.hvd.start_timeline(str(out / TIMELINE))
    tool.start()
    try:
        dog.at("trace", 0, 0)
        step()  # the profiler's start-up, untimed
        trainer.sync()
        dog.progress()
        trainer.allgather(None)  # every rank starts the traced steps together, as in a timed window
        t0 = time.perf_counter()
        for i in range(cfg.trace):
            dog.at("trace", 1, i)
            with tool.step(i):
                step()
        trainer.sync()
        traced_s = time.perf_counter() - t0
        dog.progress()
    finally:
        files = tool.stop()
        if timeline:
            trainer.hvd.stop_timeline()
    base = Path(cfg.output)
    return Traced(steps=cfg.trace, traced_step_s=traced_s / cfg.trace,
                  untraced_step_s=statistics.median(window_s) / cfg.steps_per_window,
                  files=[str(f.relative_to(base)) for f in files],
                  timeline=str((out / TIMELINE).relative_to(base)) if timeline and trainer.rank == 0 else None)


def build(ranks: list[RankRecord], steps_per_window: int, run_id: str) -> Trace | None:
    """The result's ``trace`` section from every rank's (None when the run traced nothing)."""
    traced = [(r, t) for r in ranks if (t := r.parts.get(TraceTracker.name))]
    if not traced:
        return None
    job_windows = [max(times) for times in zip(*(r.window_s for r in ranks), strict=True)]
    untraced = statistics.median(job_windows) / steps_per_window
    slowest = max(t.traced_step_s for _, t in traced)
    per_rank = [RankTrace(rank=r.rank, host=r.host, steps=t.steps, traced_step_s=t.traced_step_s,
                          untraced_step_s=t.untraced_step_s, cost=t.traced_step_s / t.untraced_step_s - 1,
                          files=t.files, timeline=t.timeline) for r, t in traced]
    timeline = next((p.timeline for p in per_rank if p.timeline), None)
    return Trace(steps=per_rank[0].steps, folder=folder(run_id), traced_step_s=slowest, untraced_step_s=untraced,
                 cost=slowest / untraced - 1, horovod_timeline=timeline, per_rank=per_rank, definitions=DEFINITIONS)


def table_rows(section: Trace | None) -> list[tuple[str, str, str]]:
    """The run table's rows: where the files are and what tracing cost."""
    if section is None:
        return []
    rows = [("trace (after the windows)", f"{section.steps} steps", f"per rank, in {section.folder}/"),
            ("  tracing cost", f"{100 * section.cost:+.0f}",
             f"% per step ({1e3 * section.traced_step_s:.1f} ms traced, {1e3 * section.untraced_step_s:.1f} "
             "ms in the windows)")]
    if section.horovod_timeline:
        rows.append(("  Horovod timeline", "written", section.horovod_timeline))
    return rows


@register
class TraceTracker(Tracker):
    """--trace N: the framework's profiler (and Horovod's timeline) over N steps of their own, after the checksum,
    into the folder named after the run's id (rank 0's, every rank's copy)."""
    name = field = "trace"
    model = Trace

    @classmethod
    def wanted(cls, ctx) -> bool:
        return bool(ctx.cfg.trace)

    def after_checksum(self) -> None:
        ctx, trainer = self.ctx, self.ctx.trainer
        run_id = trainer.allgather(ctx.run_id if trainer.rank == 0 else None)[0]  # the files' folder
        spec = mode(ctx.cfg.mode)
        self.traced = measure(trainer, ctx.cfg, spec.framework, spec.horovod, run_id, ctx.window_s,
                              ctx.hooks.slowed(trainer.rank, trainer.step, trainer.sync), ctx.dog)

    def part(self) -> Traced:
        return self.traced

    @classmethod
    def section(cls, job: Ranks) -> Trace | None:
        return build(job.ranks, job.cfg.steps_per_window, job.run_id)

    @classmethod
    def rows(cls, section: Trace | None) -> list[tuple[str, str, str]]:
        return table_rows(section)
