"""Per-rank attribution: where each rank's step time goes, and which rank holds the others back.

A synchronous gradient exchange makes every rank wait for the slowest, so the timed windows give every rank the
same step time; a rank that computes slowly then looks like a slow network on all the others. After its timed
windows (and after the parameter checksum, so the result's checks are untouched), each rank of a distributed run
also times, in the same process and on the same communicator:

* ``k`` *compute-only* steps: the mode's own step with the gradient exchange skipped (forward, backward and
  the run's optimizer's update on the rank's own gradients);
* ``k`` *exchange-only* steps: the step's gradient exchange alone, the same tensors (sizes, dtype, DDP's
  buckets) through the same library, with nothing to compute.

Every rank starts each of these steps together (a barrier before each, so that ranks sharing a host contend as
they do in the timed steps), and times it on its own up to its device sync, so a rank's compute is its own
pace, never a wait for another rank. Per rank, in seconds per step::

    compute_s   = the fastest compute-only step
    exchange_s  = the fastest exchange-only step
    step_s      = fastest timed window of the job / steps per window   (a window of the job lasts as long as
                  its slowest rank's; the fastest of those, the same statistic as compute_s, so the difference
                  below is one pace minus another; the same for every rank, as a synchronous step is)
    data_wait_s = the rank's wait for its batch per step in that window (--data: bench.data.feed; else 0): on a
                  GPU (PyTorch) the time its device sat idle for the batch (idle_s), since the host's wait
                  overlaps the kernels it queued; the host's wait elsewhere
    exposed_s   = max(0, step_s - compute_s - data_wait_s)
                  the part of a step the rank spends on, or waiting in, the exchange (a wait for data is not one)
    hidden_share = 1 - exposed_s / exchange_s, clipped to [0, 1]
                 the share of the exchange that the backward pass hid (1: all of it, 0: none)

compute_s + data_wait_s + exposed_s = step_s by construction, except where a compute-only step ran slower than
the rest of a whole timed step (noise larger than the exchange): exposed_s is then 0, never negative, and
``exposed_clipped`` says so. The compute-only steps draw no batch: they reuse the step's own.
What is measured apart is compute_s and exchange_s.

The fastest, not the median: interference (another process on the core, a page fault, the first use of a
buffer) only ever adds time, so a rank's fastest step is its own pace, and two steps of each kind are enough
to drop one disturbed step (the first exchange-only step, which touches its buffers first, took 1.17 s
against 0.29 s for the next on this host). Every raw step time is kept.

The straggler is the rank with the slowest compute: ``slowdown`` = its compute_s / the median compute_s of the
other ranks. It is named when the slowdown exceeds STRAGGLER_THRESHOLD (0.35: without any fault, ranks sharing
this 2-core host with each other's Horovod and Gloo threads computed up to 1.29 x apart in 6 runs, so a lower
threshold named ranks that were not slow; a rank slowed x2 on purpose measured x1.98 to x2.31). The per-rank
figures are there whatever the threshold; bench diagnose holds them against its own rules.
``wait_share`` = (its compute_s - the others' median) / step_s: the share of every step that each other rank
spends waiting for it. A rank's exposed_s includes that wait, which is why its own compute_s is what names it.

These steps are outside every headline figure. ``k`` is ``--attribution-steps`` (default: one per 20 timed steps,
at least 2, so that one disturbed step is dropped; 0 turns the attribution off); ``cost_s`` is the slowest rank's
wall time for the whole attribution (tf-horovod first traces its compute-only step, untimed). At the CPU
profile's 20 timed steps the default added 8.5 to 10.2% to the whole command here (docs/measuring.md).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from bench.data.feed import FeedTracker
from bench.measure.stats import fastest_window, job_step
from bench.measure.tracker import Ranks, Tracker, register

if TYPE_CHECKING:
    from bench.measure.raw import RankRecord


class _RankOf(BaseModel):
    """Which rank: its number, host and device."""
    model_config = ConfigDict(extra="forbid")
    rank: int
    host: str
    device: str


class RankAttribution(_RankOf):
    """One rank's step, taken apart (bench.measure.attribution); seconds per step."""
    compute_s: float = Field(description="per step with the gradient exchange skipped (the fastest compute-only step)")
    exchange_s: float = Field(description="per gradient exchange alone, same tensors and communicator (the fastest)")
    step_s: float = Field(description="per step in the timed windows (the job's fastest window / steps per window)")
    data_wait_s: float = Field(0.0, description="per step, the rank's wait for its batch in the window step_s is "
                                                "read from (--data; 0 otherwise, and in results before it was kept)")
    exposed_s: float = Field(description="max(0, step_s - compute_s - data_wait_s): time in, or waiting for, the "
                                         "exchange")
    exposed_clipped: bool = Field(False, description="step_s < compute_s + data_wait_s (noise above the exchange): "
                                                     "exposed_s is 0")
    hidden_share: float | None = Field(description="1 - exposed_s / exchange_s, clipped to [0, 1]")
    compute_step_s: list[float] = Field(description="raw: each compute-only step's wall time")
    exchange_step_s: list[float] = Field(description="raw: each exchange-only step's wall time")
    graphs_compiled: int | None = Field(None, description="--compile or --xla: graphs compiled during the timed "
                                                          "compute-only and exchange-only steps (0 expected)")


class Straggler(_RankOf):
    slowdown: float = Field(description="its compute_s / the other ranks' median compute_s")
    compute_s: float
    others_compute_s: float
    wait_share: float | None = Field(description="(compute_s - others_compute_s) / step_s: the share of every "
                                                 "step the other ranks spend waiting for it")


class Attribution(BaseModel):
    """Where each rank's step goes, and the straggler (bench.measure.attribution); ``measured`` false says why not."""
    model_config = ConfigDict(extra="forbid")
    measured: bool
    reason: str | None = Field(None, description="why there are no figures (measured false)")
    unit: Literal["s"] | None = None
    steps: int | None = Field(None, description="compute-only steps, and exchange-only steps, per rank")
    per_rank: list[RankAttribution] | None = None
    straggler: Straggler | None = None
    straggler_threshold: float | None = Field(None, description="the slowdown - 1 above which a rank is named")
    hidden_share_median: float | None = None
    exposed_s_median: float | None = None
    cost_s: float | None = Field(None, description="the slowest rank's wall time for the attribution windows")
    definitions: dict[str, str]

STRAGGLER_THRESHOLD = 0.35

DEFINITIONS = {
    "compute_s": "seconds per step with the gradient exchange skipped (the fastest compute-only step)",
    "exchange_s": "seconds per gradient exchange alone, same tensors and communicator (the fastest exchange-only "
                  "step)",
    "step_s": "seconds per step in the timed windows (the job's fastest window, each window as long as its slowest "
              "rank's, / steps per window)",
    "data_wait_s": "the rank's wait for its batch per step in the window step_s is read from (--data; else 0): on "
                   "a GPU (PyTorch) its device's idle for the batch (CUDA events), elsewhere the host's wait",
    "exposed_s": "max(0, step_s - compute_s - data_wait_s): the step's time in, or waiting for, the exchange",
    "hidden_share": "1 - exposed_s / exchange_s, clipped to [0, 1]: the share of the exchange hidden by compute",
    "graphs_compiled": "--compile or --xla: graphs the rank compiled during its timed compute-only and exchange-only "
                       "steps (0 expected: the compute-only step is compiled before it is timed)",
    "straggler": f"the rank whose compute_s exceeds the other ranks' median by more than "
                 f"{STRAGGLER_THRESHOLD:.0%}; slowdown = its compute_s / that median, wait_share = (its compute_s"
                 f" - that median) / step_s",
}


def default_steps(steps_per_window: int, windows: int) -> int:
    """One attribution step of each kind per 20 timed steps, at least 2 (the fastest drops one disturbed step)."""
    return max(2, steps_per_window * windows // 20)


def sparse_exchange(cfg) -> str | None:
    """Why a run with sparse embedding gradients cannot time its exchange alone (None: it can)."""
    if cfg.sparse_embeddings and not cfg.sparse_as_dense:
        return ("sparse embedding gradients: their exchange (allgathered rows) is not timed alone; "
                "add --sparse-as-dense, or --attribution-steps 0")
    return None


def unsupported(trainer) -> str | None:
    """Why ``trainer`` cannot time its compute and its exchange apart (None: it can)."""
    why = getattr(trainer, "attribution_unsupported", None)
    if why is None:
        return "this mode cannot skip its gradient exchange"
    return why()


@dataclass(frozen=True)
class StepsApart:
    """One rank's raw attribution windows (its part, AttributionTracker): each compute-only and exchange-only
    step's wall time; or, for a mode that cannot take its step apart, why (``unsupported``)."""
    steps: int = 0
    compute_step_s: list[float] = field(default_factory=list)
    exchange_step_s: list[float] = field(default_factory=list)
    cost_s: float = 0.0  # the wall time of both windows together
    unsupported: str | None = None
    graphs_compiled: int | None = None  # --compile, --xla: graphs compiled during the timed steps (0 expected)


def measure(trainer, steps: int, compute_step, dog) -> StepsApart:
    """This rank's raw attribution windows (``compute_step``: the trainer's, with any fault hook around it):
    each step timed on its own, up to the rank's device sync."""
    t_begin = time.perf_counter()
    if getattr(trainer, "traces_compute_step", False):
        dog.at("attribution", 0, 0)
        compute_step()  # untimed: a compiled step is traced for the compute-only variant first
        trainer.sync()
        dog.progress()
    graphs = getattr(trainer, "compiled_graphs", None) or (lambda: None)
    graphs_before = graphs()
    times: dict[str, list[float]] = {"compute": [], "exchange": []}
    for name, step in (("compute", compute_step), ("exchange", trainer.exchange)):
        for i in range(steps):
            trainer.allgather(None)  # a barrier: every rank starts each step together, as in the timed steps
            dog.at(f"attribution {name}", 1, i)
            t0 = time.perf_counter()
            step()
            trainer.sync()
            times[name].append(time.perf_counter() - t0)
            dog.progress()
    trainer.allgather(None)
    compiled = None if graphs_before is None else graphs() - graphs_before
    return StepsApart(steps=steps, compute_step_s=times["compute"], exchange_step_s=times["exchange"],
                      cost_s=time.perf_counter() - t_begin, graphs_compiled=compiled)


def data_wait(rank: RankRecord, window: int, steps_per_window: int) -> float:
    """The rank's wait for its batch per step in timed window ``window``: its device's idle for it where that was
    measured (a GPU), else the host's wait (0 without --data; the coordinator of tf-native ps, whose workers wait
    instead, 0 too)."""
    data = rank.parts.get(FeedTracker.name)
    waits = [] if data is None or data.per_worker is not None else \
        data.idle_step_s if data.idle_step_s is not None else data.wait_step_s
    part = waits[window * steps_per_window:(window + 1) * steps_per_window]
    return sum(part) / steps_per_window if part else 0.0


def build(ranks: list[RankRecord], steps_per_window: int) -> Attribution | None:
    """The result's ``attribution`` section from every rank's record (None: not asked for)."""
    raw = [r.parts.get(AttributionTracker.name) for r in ranks]
    if all(a is None for a in raw):
        return None
    reasons = {a.unsupported for a in raw if a and a.unsupported}
    measured = [a for a in raw if a is not None]
    if reasons or len(measured) < len(raw):
        return Attribution(measured=False, reason="; ".join(sorted(reasons)) or "not every rank measured it",
                           definitions=DEFINITIONS)
    windows = [r.window_s for r in ranks]
    step = job_step(windows, steps_per_window)
    window = fastest_window(windows)
    per_rank = []
    for r, a in zip(ranks, measured, strict=True):
        compute = min(a.compute_step_s)
        exchange = min(a.exchange_step_s)
        waited = data_wait(r, window, steps_per_window)
        exposed = max(0.0, step - compute - waited)
        hidden = min(1.0, max(0.0, 1.0 - exposed / exchange)) if exchange > 0 else None
        per_rank.append(RankAttribution(rank=r.rank, host=r.host, device=r.device, compute_s=compute,
                                        exchange_s=exchange, step_s=step, data_wait_s=waited, exposed_s=exposed,
                                        hidden_share=hidden, exposed_clipped=step < compute + waited,
                                        compute_step_s=a.compute_step_s, exchange_step_s=a.exchange_step_s,
                                        graphs_compiled=a.graphs_compiled))
    return Attribution(measured=True, unit="s", steps=measured[0].steps, per_rank=per_rank,
                       straggler=straggler(per_rank), straggler_threshold=STRAGGLER_THRESHOLD,
                       hidden_share_median=_median([p.hidden_share for p in per_rank]),
                       exposed_s_median=statistics.median(p.exposed_s for p in per_rank),
                       cost_s=max(a.cost_s for a in measured), definitions=DEFINITIONS)


def straggler(per_rank: list[RankAttribution]) -> Straggler | None:
    """The slowest-computing rank when it is slower than the others' median by more than the threshold."""
    if len(per_rank) < 2:
        return None
    slow = max(per_rank, key=lambda p: p.compute_s)
    others = statistics.median(p.compute_s for p in per_rank if p is not slow)
    if others <= 0:
        return None
    slowdown = slow.compute_s / others
    if slowdown - 1 <= STRAGGLER_THRESHOLD:
        return None
    return Straggler(rank=slow.rank, host=slow.host, device=slow.device, slowdown=slowdown, compute_s=slow.compute_s,
                     others_compute_s=others,
                     wait_share=(slow.compute_s - others) / slow.step_s if slow.step_s > 0 else None)


def table_rows(section: Attribution | None) -> list[tuple[str, str, str]]:
    """The terminal table's rows (label, value, unit) for a result's attribution section."""
    if section is None:
        return []
    if not section.measured or not section.per_rank:
        return [("attribution", "not measured", section.reason or "")]
    ranks = section.per_rank
    compute = statistics.median(p.compute_s for p in ranks)
    exchange = statistics.median(p.exchange_s for p in ranks)
    hidden = section.hidden_share_median
    rows = [("compute / step (median rank)", f"{1000 * compute:.1f} / {1000 * ranks[0].step_s:.1f}",
             "ms, compute-only step / timed step"),
            ("exchange alone / exposed", f"{1000 * exchange:.1f} / {1000 * (section.exposed_s_median or 0):.1f}",
             f"ms; hidden share {'n/a' if hidden is None else f'{100 * hidden:.0f}%'}")]
    slow = section.straggler
    if slow is None:
        rows.append(("straggler", "none", f"no rank's compute over {section.straggler_threshold or 0:.0%} slower"))
    else:
        wait = "n/a" if slow.wait_share is None else f"{100 * slow.wait_share:.0f}%"
        rows.append(("straggler", f"rank {slow.rank}",
                     f"{slow.host} {slow.device}: compute x{slow.slowdown:.2f} the others'; they wait "
                     f"{wait} of each step"))
    return rows


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


@register
class AttributionTracker(Tracker):
    """--attribution-steps, more than one process: compute-only and exchange-only steps of its own, after the
    checksum (module docstring); a mode that cannot take its step apart says why."""
    name = field = "attribution"
    model = Attribution

    @classmethod
    def wanted(cls, ctx) -> bool:
        return bool(ctx.cfg.attribution_steps) and ctx.trainer.world_size > 1

    def after_checksum(self) -> None:
        trainer, hooks = self.ctx.trainer, self.ctx.hooks
        why = unsupported(trainer)
        self.apart = StepsApart(unsupported=why) if why else measure(
            trainer, self.ctx.cfg.attribution_steps, hooks.slowed(trainer.rank, trainer.compute_step, trainer.sync),
            self.ctx.dog)

    def part(self) -> StepsApart:
        return self.apart

    @classmethod
    def section(cls, job: Ranks) -> Attribution | None:
        return build(job.ranks, job.cfg.steps_per_window)

    @classmethod
    def rows(cls, section: Attribution | None) -> list[tuple[str, str, str]]:
        return table_rows(section)
