"""Trackers: each measurement beside the timing skeleton, one object with a name (DESIGN.md's "a tracker is an
object with a name"; optimum-benchmark's trackers/).

The loop (bench.measure.loop) owns the timing skeleton: set-up, the first step, warmup, settling, the timed windows
and their synchronisation, the parameter checksum, and what decides when it stops (goal evaluations, checkpoints,
the watchdog, hooks). Everything else it measures is a tracker, and the loop calls every active one at these points,
in this order, on every rank:

    started          after set-up, before the first step
    first_step_done  after the synchronised first step
    before_windows   before the barrier that opens window 1 (a reading here costs no rank its place in the window)
    windows_open     after that barrier, before window 1's clock starts
    before_window    before each window's clock starts        }  outside the clocks: a reading here is not timed
    after_window     after each window's clock stops          }
    after_windows    after the last window, before the parameter checksum
    after_checksum   steps of its own (trace, attribution), outside every headline figure
    finished         last, before this rank's part is gathered (threads stopped)

and then ``part()``: the raw record this rank hands to rank 0 (pickled by the frameworks' allgathers), kept in
``RankRecord.parts`` under the tracker's name. On rank 0, bench.records.results builds the tracker's result section
from every rank's part (``section``) and places it (``place``: the Result field named ``name``, by default);
the run's table shows its ``rows`` and its ``warning``, and ``bench report`` reads it back with ``read``.

A tracker registers its class (``register``) when its module is imported. The built-in ones are named in
bench.measure.builtin_trackers (their modules, imported on first use, as modes name theirs), which lists every
registered one in order; a plugin's (bench.plugins) registers at import like any other:
tests/plugins/toy_tracker.py is one, in one file. A section whose name the Result model does
not declare is kept in the result's ``measurements``, by name, and read back through its model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

if TYPE_CHECKING:
    from bench.measure.raw import RankRecord

@dataclass
class Context:
    """What a tracker on one rank may read and use: the run's settings, the trainer (its steps, sync and
    allgather), how the rank was started, the watchdog to report progress to, the hooks (bench verify's, the slow
    rank fault), rank 0's run id (every rank's copy), and the timed windows so far (the loop appends each)."""
    cfg: Any  # bench.config.RunConfig
    trainer: Any  # bench.measure.loop.Trainer
    launch: Any  # bench.launching.detect.LaunchInfo
    dog: Any  # bench.measure.watchdog.Watchdog
    hooks: Any  # bench.hooks.Hooks
    run_id: str | None = None
    window_s: list[float] = field(default_factory=list)

    @property
    def measuring(self) -> int:
        """The processes that measure (bench.measure.loop.measuring)."""
        return getattr(self.trainer, "measuring_processes", self.trainer.world_size)


@dataclass
class Ranks:
    """What rank 0 builds every section from: the run's settings, every measuring rank's raw record (by rank), the
    run id, and the figures the result derives before the sections (``world``: the replicas; ``rate``: the
    headline samples/s; ``init_s``: the slowest rank's)."""
    cfg: Any  # bench.config.RunConfig
    ranks: list[RankRecord]
    run_id: str
    world: int
    rate: float
    init_s: float

    def parts(self, name: str) -> list[Any]:
        """Every rank's part from the tracker ``name`` (None where a rank has none)."""
        return [r.parts.get(name) for r in self.ranks]

    @property
    def timed_steps(self) -> int:
        """Steps per rank in the timed windows."""
        return self.cfg.steps_per_window * len(self.ranks[0].window_s)


class Tracker:
    """One measurement. A subclass names itself (``name``: its part's key), says which Result field its section
    fills (``field``; None: the result's ``measurements``, under its name), gives its section's model (``model``),
    and overrides the points it reads at (module docstring); every point does nothing here. One instance per rank
    per run."""
    name: ClassVar[str]
    field: ClassVar[str | None] = None
    model: ClassVar[type[BaseModel] | None] = None

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    @classmethod
    def wanted(cls, ctx: Context) -> bool:
        """Whether this run measures it on this rank (a tracker not wanted is not made, and has no part)."""
        return True

    def started(self) -> None: ...
    def first_step_done(self) -> None: ...
    def before_windows(self) -> None: ...
    def windows_open(self) -> None: ...
    def before_window(self) -> None: ...
    def after_window(self) -> None: ...
    def after_windows(self) -> None: ...
    def after_checksum(self) -> None: ...
    def finished(self) -> None: ...

    def part(self) -> Any:
        """This rank's raw record (None: nothing measured)."""
        return None

    @classmethod
    def section(cls, job: Ranks) -> BaseModel | None:
        """The result's section from every rank's part (None: none in this result)."""
        return None

    @classmethod
    def place(cls, fields: dict[str, Any], section: BaseModel | None) -> None:
        """Put ``section`` into the result's fields (the Result's keyword arguments, while it is assembled): under
        ``field``, or as JSON in ``measurements`` under ``name``."""
        if cls.field is not None:
            fields[cls.field] = section
        elif section is not None:
            fields["measurements"] = {**(fields.get("measurements") or {}), cls.name: section.model_dump(mode="json")}

    @classmethod
    def read(cls, result: Any) -> BaseModel | None:
        """This tracker's section of a result as its model: its field, or its entry in ``measurements``."""
        if cls.field is not None:
            return getattr(result, cls.field)
        raw = (result.measurements or {}).get(cls.name)
        return None if raw is None or cls.model is None else cls.model.model_validate(raw)

    @classmethod
    def rows(cls, section: Any) -> list[tuple[str, str, str]]:
        """The run's table rows (label, value, unit) for its section."""
        return []

    @classmethod
    def warning(cls, section: Any, result: Any) -> str | None:
        """One line on stderr after the run's table when its section shows something wrong with the figures."""
        return None


TRACKERS: dict[str, type[Tracker]] = {}


def register(cls: type[Tracker]) -> type[Tracker]:
    """Add a tracker (a class decorator); a second one of the same name replaces the first."""
    TRACKERS[cls.name] = cls
    return cls
