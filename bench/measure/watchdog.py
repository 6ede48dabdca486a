"""Stall watchdog: a rank that sees no progress for too long ends the job instead of hanging.

Progress is a completed step: warmup steps and timed windows both count, the first step included. A daemon
thread checks the time since the last progress; past the bound it prints one line naming where this rank is
(window, step, and whether it was inside a step or waiting for the others at the end of the run, and where its
main thread waits: :func:`main_thread_site`), writes the same as JSON to ``$HVDBENCH_STALL_DIR/rank-<N>.json``
when the self-spawner set one, and exits with :data:`STALL_EXIT` without unwinding (the main thread is blocked
and cannot), :data:`REPORT_GRACE_S` later, so that the others report before its exit breaks their connections.

The bound (``--stall-timeout``; formula in :func:`auto_bound`) is generous by default so that a slow but
healthy run is never cut: ``max(120 s, 20 x first step x steps per window)``. Until the first step has finished
(tracing, compilation, the first collectives), it is ``max(bound, 600 s, 2 x rendezvous timeout)``.

The self-spawner reads the reports (:func:`diagnose`): a rank that wrote none was frozen (stopped, or stuck
holding the interpreter) and did not arrive; a rank behind the furthest position did not arrive either. Under
srun, where each rank speaks for itself, the line also names the step's hosts that no longer answer, with their
ranks (:func:`bench.launching.slurm.unanswered`): a lost node or a cut link.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.launching import slurm

STALL_EXIT = 75  # EX_TEMPFAIL: the job may succeed when run again
STALL_DIR_ENV = "HVDBENCH_STALL_DIR"
FLOOR_S = 120.0
FIRST_STEP_FLOOR_S = 600.0
REPORT_GRACE_S = 5.0  # a stalled rank's wait, after its report, for the others' (the spawner stops it sooner)


PHASES = ("first step", "warmup", "window", "gather")  # in the order a run goes through them; others rank first


@dataclass(frozen=True)
class Where:
    """Where a rank is: its phase (a step's: warmup, window; or first step, evaluate, checkpoint, gather), and the
    window (or epoch) and step in it."""
    phase: str = "first step"
    window: int = 0
    step: int = 0

    def __str__(self) -> str:
        if self.phase in ("window", "warmup"):
            return f"in {self.phase} {self.window}, step {self.step}"
        return f"in the {self.phase}"

    def order(self) -> tuple[int, int, int]:
        """An order over positions: later phases and steps are further on."""
        return PHASES.index(self.phase) if self.phase in PHASES else 0, self.window, self.step


@dataclass(frozen=True)
class StallReport:
    """What a stalled rank's watchdog writes to ``$HVDBENCH_STALL_DIR/rank-<N>.json`` (its fields, flat)."""
    rank: int
    where: Where
    bound_s: float
    waited_s: float = 0.0
    site: str = ""  # where its main thread waited (:func:`main_thread_site`)

    def to_json(self) -> str:
        fields = asdict(self)
        return json.dumps({**fields.pop("where"), **fields})

    @classmethod
    def from_json(cls, text: str) -> StallReport:
        """A report as written by :meth:`to_json`; ValueError, KeyError or TypeError where the text is not one."""
        data = json.loads(text)
        place = {k: data.pop(k) for k in ("phase", "window", "step") if k in data}
        return cls(where=Where(**place), **data)


def auto_bound(first_step_s: float, steps_per_window: int) -> float:
    """Default bound once the first step is done: 20 windows' worth of first steps, at least 120 s."""
    return max(FLOOR_S, 20.0 * first_step_s * steps_per_window)


class Watchdog:
    def __init__(self, rank: int, stall_timeout: float | None, rendezvous_timeout: float,
                 poll_s: float = 1.0) -> None:
        self.rank = rank
        self.explicit = stall_timeout
        self.bound = max(stall_timeout or 0.0, FIRST_STEP_FLOOR_S, 2 * rendezvous_timeout)
        self.where = Where()
        self._last = time.monotonic()
        self._poll_s = poll_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="hvdbench-watchdog", daemon=True)

    def start(self) -> None:
        self._last = time.monotonic()
        self._thread.start()

    def first_step_done(self, first_step_s: float, steps_per_window: int) -> None:
        self.bound = self.explicit if self.explicit is not None else auto_bound(first_step_s, steps_per_window)
        self.progress()

    def at(self, phase: str, window: int = 0, step: int = 0) -> None:
        """Where this rank is now (cheap: called around every step)."""
        self.where = Where(phase, window, step)

    def progress(self) -> None:
        self._last = time.monotonic()

    def stop(self) -> None:
        self._done.set()

    def _watch(self) -> None:
        while not self._done.wait(self._poll_s):
            waited = time.monotonic() - self._last
            if waited > self.bound:
                self._fire(waited)

    def _fire(self, waited: float) -> None:
        w = self.where
        # under srun, the hosts of the step that no longer answer (a lost node, a cut link) are named
        quiet = slurm.unanswered(os.environ, self.rank) if "SLURM_STEP_ID" in os.environ else ""
        at = main_thread_site()
        report = StallReport(rank=self.rank, where=w, bound_s=round(self.bound, 1), waited_s=round(waited, 1),
                             site=at)
        print(f"rank {self.rank}: error: stalled: no progress for {waited:.0f} s (bound {self.bound:.0f} s, "
              f"--stall-timeout); this rank is {w}{', waiting' + at if at else ''}{quiet}",
              file=sys.stderr, flush=True)
        folder = os.environ.get(STALL_DIR_ENV)
        if folder:
            try:
                (Path(folder) / f"rank-{self.rank}.json").write_text(report.to_json())
            except OSError:
                pass
        # Exit only after the others had the time to fire too: this rank's exit closes its connections, and a
        # peer waiting in a collective would then fail on the closed connection instead of saying where it was.
        time.sleep(REPORT_GRACE_S)
        os._exit(STALL_EXIT)


def site(frames: list[tuple[str, int]], importing: bool = False) -> str:
    """Where a thread is, from its frames (file, line), innermost first: the innermost frame in an installed
    package (site-packages; else the innermost of Python code) and the package, e.g. " in torch
    (.../utils/data/dataloader.py:1310)"; "" without frames. A rank's stall names where its main thread waits (a
    collective's call, a loader's queue), a rank's crash where the signal struck (bench.launching.supervise)."""
    parts = [(Path(name).parts, line) for name, line in frames if not name.startswith("<")]
    if not parts:
        return ""
    installed = [(p, n) for p, n in parts if any(d in p[:-1] for d in ("site-packages", "dist-packages"))]
    path, line = (installed or parts)[0]
    top = next((i for i, d in enumerate(path) if d in ("site-packages", "dist-packages")), None)
    package = path[top + 1] if top is not None else path[-2] if path[-1] == "__init__.py" else path[-1]
    return (f" in {package.removesuffix('.py')} (.../{'/'.join(path[-3:])}:{line}"
            f"{', while importing' if importing else ''})")


def main_thread_site() -> str:
    """:func:`site` of this process's main thread, as the watchdog thread sees it, and the innermost line of
    this package on the way there, e.g. " in torch (.../utils/data/dataloader.py:1310), from
    bench/data/feed.py:120" (a loader's queue), " in torch (.../torch/autograd/graph.py:829), from
    bench/modes/torch_common.py:219" (a backward pass waiting for its gradient exchange)."""
    import traceback

    frame = sys._current_frames().get(threading.main_thread().ident)
    if frame is None:
        return ""
    stack = traceback.extract_stack(frame)  # outermost first
    at = site([(f.filename, f.lineno) for f in reversed(stack)],
              any("importlib._bootstrap" in f.filename for f in stack))
    home = Path(__file__).resolve().parents[1]  # bench/
    own = next((f for f in reversed(stack) if Path(f.filename).resolve().is_relative_to(home)
                and Path(f.filename).resolve() != Path(__file__).resolve()), None)
    if own is not None and at:
        at += f", from bench/{Path(own.filename).resolve().relative_to(home).as_posix()}:{own.lineno}"
    return at


def read_reports(folder: Path) -> dict[int, StallReport]:
    """Every rank's report in ``folder``, by rank (a file being written, or not a report, is passed over)."""
    reports = {}
    for path in folder.glob("rank-*.json"):
        try:
            report = StallReport.from_json(path.read_text())
        except (OSError, ValueError, KeyError, TypeError):
            continue
        reports[report.rank] = report
    return reports


def diagnose(reports: dict[int, StallReport], ranks: int) -> str:
    """One line: which ranks did not arrive where the others waited."""
    silent = [r for r in range(ranks) if r not in reports]
    if not reports:
        return "no rank reported"
    furthest = max(w.where.order() for w in reports.values())
    behind = sorted(r for r, w in reports.items() if w.where.order() < furthest)
    lagging = sorted(silent + behind)
    waiting = sorted(r for r in reports if r not in behind)
    first = reports[waiting[0]]
    where = str(first.where)
    bound = first.bound_s
    if not lagging:
        sites = {r: reports[r].site for r in waiting}
        if len(set(sites.values())) > 1:  # not all in the same call: one waits on something else (its loader)
            return (f"stalled: every rank waited {bound:.0f} s {where}, at different places: " +
                    "; ".join(f"rank {r}{s or ' (unknown)'}" for r, s in sites.items()))
        return (f"stalled: every rank waited {bound:.0f} s {where}{sites[waiting[0]]}: the collective itself hung "
                "(network, or a peer outside this job)")
    why = [f"{r}: frozen (stopped, or stuck without releasing the interpreter)" for r in silent]
    why += [f"{r}: {reports[r].where}" for r in behind]
    return (f"stalled: rank(s) {', '.join(map(str, lagging))} did not arrive ({'; '.join(why)}); "
            f"rank(s) {', '.join(map(str, waiting))} waited {bound:.0f} s {where}")


# The deadline's watcher: a shell outside this process, since the wait it bounds may hold Python's GIL.
_DEADLINE_SH = ('for _ in $(seq "$1"); do sleep 1; kill -0 "$3" 2>/dev/null || exit 0; done; '
                'printf "%s\\n" "$2" >&2; kill -KILL "$3"')


@contextmanager
def deadline(seconds: float, message: str, rank: int):
    """Run the block; if it has not finished after ``seconds``, print ``rank N: error: MESSAGE`` and end
    this process (SIGKILL).

    For waits inside a framework's C++ code that neither a Python exception nor a Python thread can
    interrupt: TensorFlow's multi-worker rendezvous waits forever, holding the GIL, when a worker never comes.
    The watcher is a small shell process that polls this one each second and leaves once it is gone.
    """
    import subprocess

    watcher = subprocess.Popen(["/bin/sh", "-c", _DEADLINE_SH, "deadline", str(max(1, round(seconds))),
                                f"rank {rank}: error: {message}", str(os.getpid())], stdin=subprocess.DEVNULL)
    try:
        yield
    finally:
        watcher.kill()
        watcher.wait()
