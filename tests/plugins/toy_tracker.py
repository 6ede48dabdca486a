"""A throwaway measurement, registered from outside bench (HVDBENCH_PLUGINS=toy_tracker): the registry's test that a
new measurement is this one file (tests/multiproc/test_registry.py).

``context_switches``: each rank's voluntary and involuntary context switches (getrusage, its own process) over the
timed windows, per timed step. A rank the scheduler keeps taking the core from shows it. Its section lands in the
result's ``measurements``, its row in the run's table, and ``bench report`` reads it back.
"""

from __future__ import annotations

import resource
import socket

from pydantic import BaseModel

from bench.measure.tracker import Ranks, Tracker, register


class RankSwitches(BaseModel):
    rank: int
    host: str
    voluntary_per_step: float
    involuntary_per_step: float


class Switches(BaseModel):
    per_rank: list[RankSwitches]
    involuntary_per_step_max: float
    definition: str


def counts() -> tuple[int, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw, usage.ru_nivcsw


@register
class ContextSwitches(Tracker):
    name = "context_switches"
    model = Switches

    def windows_open(self) -> None:
        self.before = counts()

    def after_windows(self) -> None:
        after = counts()
        self.switches = (after[0] - self.before[0], after[1] - self.before[1], socket.gethostname())

    def part(self) -> tuple[int, int, str]:
        return self.switches

    @classmethod
    def section(cls, job: Ranks) -> Switches:
        steps = job.timed_steps
        per_rank = [RankSwitches(rank=r.rank, host=host, voluntary_per_step=vol / steps,
                                 involuntary_per_step=inv / steps)
                    for r, (vol, inv, host) in zip(job.ranks, job.parts(cls.name), strict=True)]
        return Switches(per_rank=per_rank, involuntary_per_step_max=max(p.involuntary_per_step for p in per_rank),
                        definition="context switches of each rank's process over the timed windows, per timed "
                                   "step (getrusage)")

    @classmethod
    def rows(cls, section: Switches | None) -> list[tuple[str, str, str]]:
        if section is None:
            return []
        return [("involuntary context switches", f"{section.involuntary_per_step_max:.1f}",
                 "per timed step, the most on any rank (getrusage)")]
