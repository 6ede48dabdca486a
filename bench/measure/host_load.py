"""How busy other processes kept each host's cores while the timed windows ran.

A throughput figure is the training's only on cores nothing else uses. On a busy node a run slows more than
the cores it loses: each of PyTorch's parallel operators waits for its slowest thread, and a thread the
scheduler parks behind another process holds every operator up (docs/running.md measures a hundredfold). So
every run measures what else ran, per host, over the timed windows (from the first window's start to the last
window's end, as the traffic counters):

    host_busy_cores  = delta(user + nice + system) / (interval_s x CLK_TCK)
                       from the kernel's counters of every CPU (/proc/stat's first line; a guest's time is in
                       user), read by the host's local rank 0
    irq_cores        = delta(irq + softirq) / (interval_s x CLK_TCK): the kernel's interrupt work, in no
                       process's CPU time and not told apart by whose it is: a multi-node run's own traffic
                       over sockets (Gloo, NCCL's TCP transport, Horovod's) is received there, so it is
                       reported beside the others and counted in neither run_cores nor other_cores
    steal_cores      = delta(steal) / (interval_s x CLK_TCK): time the hypervisor gave this VM's CPUs to others
    run_cores        = sum over the host's measuring ranks of delta(CPU time of the rank and every process
                       below it) / interval_s; a process's CPU time is utime + stime (all its threads) + cutime
                       + cstime (its children already reaped), from /proc/PID/stat; "below it": the loader
                       workers, the fork server, any child, found by their parent ids
    other_cores      = max(0, host_busy_cores - run_cores)

The kernel's counters are the host's, in a container too (Docker shows the host's /proc/stat), so on a node
shared with other containers other_cores counts their processes: the cores they took are the run's loss
however the node is divided. A CPU quota (cgroup cpu.max) caps what the run may use; it does not free cores.

other_cores is not given (null, with the reason) where the run has processes that do not measure: tf-native
``ps``'s servers and workers serve and only the coordinator measures, so their CPU time would count as other.
A run whose other_cores on some host is at least :data:`WARN_CORES` gets a one-line warning on stderr.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from bench.measure.tracker import Ranks, Tracker, register

if TYPE_CHECKING:
    from bench.measure.raw import RankRecord


class HostLoadHost(BaseModel):
    """One host's cores over the timed windows, averaged (bench.measure.host_load)."""
    model_config = ConfigDict(extra="forbid")
    host: str
    cpus: int = Field(ge=1, description="the host's CPUs (/proc/stat)")
    busy_cores: float = Field(ge=0, description="cores the host kept busy in processes, every process's")
    irq_cores: float | None = Field(default=None, ge=0, description="cores the kernel's interrupt work took (irq, "
                                    "softirq: the run's own network traffic among it); absent in older records")
    steal_cores: float = Field(ge=0, description="cores the hypervisor took for other guests")
    run_cores: float = Field(ge=0, description="cores this run's processes on the host kept busy")
    ranks: int = Field(ge=1, description="the measuring processes on the host")
    other_cores: float | None = Field(ge=0, description="busy_cores less run_cores, floored at 0; null where "
                                      "some of the run's processes do not measure (tf-native ps)")


class HostLoad(BaseModel):
    """Cores other processes kept busy on each host over the timed windows (bench.measure.host_load)."""
    model_config = ConfigDict(extra="forbid")
    hosts: list[HostLoadHost] = Field(min_length=1)
    other_cores_max: float | None = Field(description="the busiest host's other_cores")
    other_cores_note: str | None = Field(description="why there is no other_cores figure, where there is none")
    definition: str

PROC = Path("/proc")
WARN_CORES = 0.5
BUSY_FIELDS = (0, 1, 2)  # user nice system (the first line's values, in order)
IRQ_FIELDS = (5, 6)  # irq softirq
STEAL_FIELD = 7


@dataclass(frozen=True)
class Counters:
    """The host's CPU ticks since boot, every CPU together (/proc/stat's first line), and its CPUs."""
    busy: int  # user, nice, system
    irq: int  # irq, softirq
    steal: int
    cpus: int


@dataclass(frozen=True)
class Reading:
    """One rank's reading at a timed region's edge."""
    t: float  # time.monotonic()
    run: int | None  # the ticks of this process's tree (tree_ticks); None where /proc could not be read
    host: Counters | None  # the host's counters, on its local rank 0; None elsewhere


@dataclass(frozen=True)
class HostCores:
    """The host's cores between two readings: each kind of tick over the interval."""
    cpus: int
    busy_cores: float
    irq_cores: float
    steal_cores: float


@dataclass(frozen=True)
class CpuRecord:
    """One rank's CPU figures over the timed windows (its part, bench.measure.tracker)."""
    interval_s: float
    run_cores: float  # this rank's process tree's ticks over the interval
    serving: bool  # the run has processes that serve and do not measure (tf-native ps)
    host: HostCores | None = None  # the host's, from its local rank 0


def cpu_counters(proc: Path = PROC) -> Counters | None:
    """Ticks every CPU together spent busy in processes, in interrupts and stolen since boot, and the CPUs
    counted; None where unreadable."""
    try:
        lines = (proc / "stat").read_text().splitlines()
    except OSError:
        return None
    first = lines[0].split() if lines else []
    if not first or first[0] != "cpu" or len(first) < 9:
        return None
    values = [int(v) for v in first[1:]]
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    return Counters(busy=sum(values[i] for i in BUSY_FIELDS), irq=sum(values[i] for i in IRQ_FIELDS),
                    steal=values[STEAL_FIELD], cpus=cpus)


def stat_fields(text: str) -> list[str]:
    """The fields of /proc/PID/stat after the command name (which may hold spaces and parentheses)."""
    return text.rsplit(")", 1)[1].split()


def tree_ticks(pid: int | None = None, proc: Path = PROC) -> int | None:
    """CPU ticks of process ``pid`` (default: this one) and every live process below it, each with its reaped
    children's; None where /proc cannot be read."""
    pid = os.getpid() if pid is None else pid
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    try:
        entries = [e for e in os.listdir(proc) if e.isdigit()]
    except OSError:
        return None
    for entry in entries:
        try:
            fields = stat_fields((proc / entry / "stat").read_text())
        except (OSError, IndexError):
            continue  # ended while being read
        # after the name: state ppid ... utime(12th field after the name) stime cutime cstime
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = sum(int(v) for v in fields[11:15])
    if pid not in ticks:
        return None
    below: dict[int, list[int]] = {}
    for child, parent in parents.items():
        below.setdefault(parent, []).append(child)
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += ticks.get(p, 0)
        todo.extend(below.get(p, []))
    return total


def reading(host: bool, proc: Path = PROC) -> Reading:
    """One rank's reading at a timed region's edge: its own tree's ticks, and the host's counters when ``host``
    (the host's local rank 0)."""
    return Reading(t=time.monotonic(), run=tree_ticks(proc=proc), host=cpu_counters(proc) if host else None)


def between(before: Reading, after: Reading, serving: bool = False) -> CpuRecord | None:
    """A rank's figures between two readings (module docstring); ``serving``: the run has processes that
    serve and do not measure. None where the interval or this process's ticks are missing."""
    interval = after.t - before.t
    if interval <= 0 or before.run is None or after.run is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")

    def cores(ticks: int) -> float:
        return ticks / tick / interval
    host = None
    if before.host is not None and after.host is not None:
        host = HostCores(cpus=after.host.cpus, busy_cores=cores(after.host.busy - before.host.busy),
                         irq_cores=cores(after.host.irq - before.host.irq),
                         steal_cores=cores(after.host.steal - before.host.steal))
    return CpuRecord(interval_s=interval, run_cores=cores(after.run - before.run), serving=serving, host=host)


def section(ranks: list[RankRecord]) -> HostLoad | None:
    """The result's ``host_load``: one entry per host from its ranks' CPU records, and the busiest host's
    other_cores; None where no host could read its counters."""
    by_host: dict[str, list[CpuRecord]] = {}
    for r in ranks:
        cpu = r.parts.get(HostLoadTracker.name)
        if cpu is not None:
            by_host.setdefault(r.host, []).append(cpu)
    hosts = []
    for name, records in by_host.items():
        counters = next((c.host for c in records if c.host), None)
        if counters is None:
            continue
        run = sum(c.run_cores for c in records)
        serving = any(c.serving for c in records)
        hosts.append(HostLoadHost(host=name, run_cores=run, ranks=len(records),
                                  other_cores=None if serving else max(0.0, counters.busy_cores - run),
                                  cpus=counters.cpus, busy_cores=counters.busy_cores, irq_cores=counters.irq_cores,
                                  steal_cores=counters.steal_cores))
    if not hosts:
        return None
    others = [h.other_cores for h in hosts if h.other_cores is not None]
    return HostLoad(
        hosts=hosts,
        other_cores_max=max(others) if others else None,
        other_cores_note=None if others else "tf-native ps: its servers and workers do not measure, so their CPU "
                                             "time cannot be told from other processes'",
        definition="cores other processes kept busy on each host over the timed windows: the host's cores busy in "
                   "processes (/proc/stat: user, nice, system) less this run's processes'; the kernel's interrupt "
                   "work (irq, softirq: the run's own network traffic among it) apart as irq_cores "
                   "(bench.measure.host_load)",
    )


def table_rows(load: HostLoad | None) -> list[tuple[str, str, str]]:
    """The result table's row: the busiest host's other_cores beside the run's own, or why there is none."""
    if load is None:
        return []
    if load.other_cores_max is None:
        return [("other processes' cores", "n/a", load.other_cores_note or "")]
    worst = max((h for h in load.hosts if h.other_cores is not None), key=lambda h: h.other_cores or 0.0)
    irq = f", interrupts': {worst.irq_cores:.2f}" if worst.irq_cores is not None else ""
    return [("other processes' cores", f"{worst.other_cores:.2f}",
             f"of {worst.cpus} on {worst.host} over the windows (this run's: {worst.run_cores:.2f}{irq})")]


def warning(load: HostLoad | None) -> str | None:
    """One line when other processes kept at least WARN_CORES of some host's cores busy; else None."""
    if load is None:
        return None
    busy = [h for h in load.hosts if h.other_cores is not None and h.other_cores >= WARN_CORES]
    if not busy:
        return None
    worst = max(busy, key=lambda h: h.other_cores or 0.0)
    more = f" (and {len(busy) - 1} more host(s))" if len(busy) > 1 else ""
    return (f"warning: other processes kept {worst.other_cores:.1f} of {worst.host}'s {worst.cpus} cores "
            f"busy while the windows ran{more}; these figures are that busy node's, not an idle one's "
            "(docs/running.md: a busy node)")


@register
class HostLoadTracker(Tracker):
    """Every rank its own processes' CPU time over the timed windows, the host's local rank 0 the host's too."""
    name = field = "host_load"
    model = HostLoad

    def before_windows(self) -> None:
        self.before = reading(host=self.ctx.launch.local_rank == 0)

    def after_windows(self) -> None:
        self.cpu = between(self.before, reading(host=self.ctx.launch.local_rank == 0),
                           serving=self.ctx.measuring < self.ctx.trainer.world_size)

    def part(self) -> CpuRecord | None:
        return self.cpu

    @classmethod
    def section(cls, job: Ranks) -> HostLoad | None:
        return section(job.ranks)

    @classmethod
    def rows(cls, section: HostLoad | None) -> list[tuple[str, str, str]]:
        return table_rows(section)

    @classmethod
    def warning(cls, section: HostLoad | None, result) -> str | None:
        return warning(section)
