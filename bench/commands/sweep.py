"""bench sweep: a matrix of runs, one per cell, into one folder with a manifest; resumable.

``--seeds 1,2,3`` repeats every cell once per seed (the seed of its weights, data order and crops), as
MLPerf scores several runs of one configuration.

Each cell is an ordinary bench run in its own process (self-spawned here, or ``srun -n NP`` inside a
Slurm allocation), writing its normal result into the sweep folder. A cell gets its whole run
configuration as JSON (``configs/<cell>.json``, run with ``bench run FILE``), never as rebuilt options. The manifest
(``manifest.json``, rewritten atomically after every cell) records each cell's status (``ok``,
``failed``, ``timed_out``, ``interrupted``), its result file, duration, log file and, for a failure, the error
line, and the key of the options it ran with (``options``: the common run options and any hooks, hashed).
Re-running the same sweep, or ``bench sweep --resume --output FOLDER`` (the manifest's own matrix), skips cells
whose result exists and that ran with the same options, and reruns every other (a new target, dataset or rate
reruns them all), unless ``--redo``.

Endings: Ctrl-C, SIGTERM or SIGHUP to the sweep stops the running cell (SIGTERM to its process group; the
cell's own bench stops its ranks) and marks it ``interrupted``. ``--cell-timeout`` ends a cell that runs
longer the same way, marks it ``timed_out`` and goes on with the next.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from bench import SCHEMA_VERSION, files
from bench.config import PLUGIN_OPTIONS, RunConfig, check_declared, cli_options, comma_list, int_list, option, takes
from bench.errors import BenchError, NotValid, Stopped, restore_handlers, stop_on_signals
from bench.hooks import HOOKS_ENV
from bench.launching import envs
from bench.launching.slurm import inside_allocation, srun_command
from bench.launching.supervise import SWEEP_PID_ENV, stop_processes
from bench.modes import mode_label, variant
from bench.records.results import CONFIGS_DIR, MANIFEST, check_output_dir, load_result
from bench.tables import never_cut
from bench.typed import parse

# How long a stopped cell gets to stop its own ranks (bench's spawner allows them 10 s) before SIGKILL.
CELL_GRACE_S = 20.0


def common_fields() -> set[str]:
    """Run options a sweep passes to every cell, as declared (bench.config.Option.sweep; the plugins' ones travel
    in ``extra``); the matrix's own axes are mode, np, model, precision, batch."""
    return {name for name, how in cli_options().items() if how.sweep and name not in PLUGIN_OPTIONS} | {"extra"}


@dataclass(frozen=True)
class Cell:
    mode: str
    strategy: str | None
    np: int
    model: str
    precision: str
    batch_size: int | None
    seed: int | None = None  # a repeat (--seeds); None: the run's own default seed

    @property
    def label(self) -> str:
        return mode_label(self.mode, self.strategy)

    @property
    def id(self) -> str:
        batch = self.batch_size or "default"
        repeat = "" if self.seed is None else f"_s{self.seed}"
        return f"{self.label.replace(':', '-')}_np{self.np}_{self.model}_{self.precision}_b{batch}{repeat}"

    @property
    def distributed(self) -> bool:
        return variant(self.label).mode.distributed

    def config(self, common: dict[str, Any], output: Path) -> RunConfig:
        """The cell's run configuration: its axes, the sweep's common options, the sweep folder."""
        seed = {} if self.seed is None else {"seed": self.seed}
        return RunConfig(mode=self.mode, strategy=self.strategy, model=self.model, precision=self.precision,
                         batch_size=self.batch_size, np=self.np, output=str(output), **seed, **common)


@dataclass(frozen=True)
class SweepMatrix:
    """The matrix a sweep runs, resolved from its flags (SweepConfig) or read back from its folder's manifest."""
    modes: list[str]
    nps: list[int]
    models: list[str] = field(default_factory=lambda: ["vgg16"])
    precisions: list[str] = field(default_factory=lambda: ["fp32"])
    batch_sizes: list[int | None] = field(default_factory=lambda: [None])
    common: dict[str, Any] = field(default_factory=dict)  # run options for every cell (common_fields())
    seeds: list[int | None] = field(default_factory=lambda: [None])  # repeats: each cell once per seed

    def __post_init__(self) -> None:
        if not isinstance(self.common, dict):
            raise BenchError("this sweep was recorded by an older hvdbench (options as a list); "
                             "start it again in a new folder")
        unknown = set(self.common) - common_fields()
        if unknown:
            raise BenchError(f"a sweep cannot set {', '.join(sorted(unknown))} for every cell")
        for label in self.modes:
            variant(label)
        if not self.nps or any(n < 1 for n in self.nps):
            raise BenchError("--np needs one or more counts >= 1, e.g. 1,2,4,8")
        if any(b is not None and b < 1 for b in self.batch_sizes):
            raise BenchError("--batch-sizes must be >= 1")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise BenchError("--seeds needs one or more different seeds, e.g. 1,2,3")
        for cell in self.cells():  # every cell's configuration is valid before any runs
            cell.config(self.common_for(cell), Path("."))

    def common_for(self, cell: Cell) -> dict[str, Any]:
        """The common options this cell's mode takes: in a sweep over modes that differ, one framework's options
        (--compile, --xla, ...) or one library's (Horovod's knobs) reach the cells of the modes that take them. An
        option no mode of the sweep takes stays, so that the cell's own check says why in one line."""
        modes = {variant(label).mode.name for label in self.modes}
        return {name: value for name, value in self.common.items()
                if takes(cell.mode, name) or not any(takes(m, name) for m in modes)}

    def options_key(self) -> str:
        """What every cell runs with beside its own fields: the common run options and the hooks exported to the
        ranks (bench converge --fault), hashed. A cell that ran with other options is not done (run_sweep)."""
        what = {"common": self.common, "hooks": os.environ.get(HOOKS_ENV)}
        return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def cells(self) -> list[Cell]:
        out = []
        for label, np, model, precision, batch, seed in itertools.product(
                self.modes, self.nps, self.models, self.precisions, self.batch_sizes, self.seeds):
            v = variant(label)
            if not v.mode.distributed and np != 1:
                continue  # single-device baselines exist at one device only
            out.append(Cell(v.mode.name, v.strategy if ":" in label else None, np, model, precision, batch, seed))
        return out


@dataclass(frozen=True)
class SweepConfig:
    """bench sweep's own options, declared once (the run options every cell gets come from RunConfig's
    declarations: ``common``, as bench.cli passes them)."""
    modes: tuple[str, ...] | None = option(None, "Comma-separated modes; mode:strategy picks a strategy, e.g. "
                                           "tf-native:ps (required unless --resume).", parse=comma_list)
    nps: tuple[int, ...] = option((1, 2), "Comma-separated rank counts.", flag="--np", aliases=("-np",),
                                  parse=int_list, shown="1,2")
    models: tuple[str, ...] = option(("vgg16",), "Comma-separated models.", parse=comma_list, shown="vgg16")
    precisions: tuple[str, ...] = option(("fp32",), "Comma-separated precisions.", parse=comma_list, shown="fp32")
    batch_sizes: tuple[int, ...] = option((), "Comma-separated per-device batch sizes (empty: each device's "
                                          "default).", parse=int_list, shown="")
    seeds: tuple[int, ...] = option((), "Comma-separated seeds: every cell once per seed, the repeats of one "
                                    "configuration (empty: once, at the run's default seed).", parse=int_list,
                                    shown="")
    output: str = option("results/sweep", "The sweep folder (results, manifest.json, logs).")
    redo: bool = option(False, "Run finished cells again instead of skipping them.", flag="--redo")
    resume: bool = option(False, "Run the matrix the folder's manifest records again: cells not ok (failed, timed "
                          "out, interrupted) rerun.", flag="--resume")
    cell_timeout: float | None = option(None, "Stop a cell that runs longer than this many seconds, mark it "
                                        "timed_out and go on.", positive=True, unit="seconds")
    common: dict[str, Any] = field(default_factory=dict)  # the run options every cell gets (bench.cli)

    def __post_init__(self) -> None:
        check_declared(self)
        if not self.resume and not self.modes:
            raise BenchError("--modes is required (or --resume to rerun a sweep folder's own matrix)")

    def sweep(self) -> SweepMatrix:
        """The matrix: the folder's own with --resume, else the one these options name."""
        if self.resume:
            return load_sweep(Path(self.output))
        return SweepMatrix(modes=list(self.modes or ()), nps=list(self.nps), models=list(self.models),
                           precisions=list(self.precisions), batch_sizes=list(self.batch_sizes) or [None],
                           common=self.common, seeds=list(self.seeds) or [None])


def main(cfg: SweepConfig) -> int:
    """bench sweep: run the matrix; a cell that failed or timed out makes it fail, naming where the logs are."""
    summary = run_sweep(cfg.sweep(), Path(cfg.output), redo=cfg.redo, cell_timeout=cfg.cell_timeout)
    bad = summary.get("failed", 0) + summary.get("timed_out", 0)
    if bad:
        raise BenchError(f"{bad} cell(s) failed or timed out; their logs are in {cfg.output}/logs")
    return 0


def write_cell_config(cell: Cell, common: dict[str, Any], folder: Path) -> Path:
    """The cell's run configuration as JSON, in ``folder/configs`` (rewritten for each attempt)."""
    path = folder / CONFIGS_DIR / f"{cell.id}.json"
    path.parent.mkdir(exist_ok=True)
    files.replace(path, cell.config(common, folder).to_json() + "\n")
    return path


def command(cell: Cell, config_path: Path, num_ps: int | None = None) -> list[str]:
    """One cell's command: self-spawned here, or one srun step per cell inside a Slurm allocation."""
    bench = [*envs.bench_command(), "run", str(config_path)]
    return srun_command(variant(cell.label), cell.np, bench, num_ps) if inside_allocation() else bench


class CellEntry(BaseModel):
    """A cell's line in the manifest: what became of its run."""
    model_config = ConfigDict(extra="allow")
    cell: dict[str, Any] | None = None  # the Cell, its fields
    status: Literal["pending", "running", "ok", "failed", "timed_out", "interrupted"] = "pending"
    options: str | None = None  # SweepMatrix.options_key of the sweep that ran it
    result: str | None = None  # its result's file name in the folder
    log: str | None = None
    error: str | None = None
    exit_code: int | None = None
    started: float | None = None
    finished: float | None = None
    seconds: float | None = None

    def set(self, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self, name, value)


class SweepManifest(BaseModel):
    """``manifest.json`` in a sweep's folder: the matrix it runs, and every cell's entry (rewritten after each)."""
    model_config = ConfigDict(extra="allow")
    schema_version: int = SCHEMA_VERSION
    kind: Literal["hvdbench-sweep"] = "hvdbench-sweep"
    sweep: dict[str, Any] | None = None  # the SweepMatrix, its fields (--resume reads it back)
    cells: dict[str, CellEntry] = {}


class Manifest:
    def __init__(self, folder: Path, sweep: SweepMatrix | None) -> None:
        self.path = folder / MANIFEST
        self.record = SweepManifest()
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text())
            except json.JSONDecodeError as exc:
                raise BenchError(f"{self.path} is not valid JSON ({exc.msg}); move it away to start afresh") from None
            if not isinstance(data, dict) or data.get("kind") != "hvdbench-sweep":
                raise BenchError(f"{self.path} is not an hvdbench sweep manifest")
            self.record = parse(data, SweepManifest, str(self.path))
        if sweep is not None:
            self.record.sweep = asdict(sweep)

    def cell(self, cell: Cell) -> CellEntry:
        return self.record.cells.setdefault(cell.id, CellEntry(cell=asdict(cell)))

    def save(self) -> None:
        files.replace(self.path, self.record.model_dump_json(indent=2, exclude_none=True))


def last_error(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["no output"])[-1][:300]


def load_sweep(folder: Path) -> SweepMatrix:
    """The matrix a sweep folder's manifest records (``--resume``)."""
    path = folder / MANIFEST
    if not path.is_file():
        raise BenchError(f"nothing to resume: {path} does not exist")
    data = Manifest(folder, None).record.sweep
    if data is None:
        raise BenchError(f"{path} records no sweep to resume")
    try:
        return SweepMatrix(**data)
    except TypeError as exc:
        raise BenchError(f"{path} records a sweep this version cannot read ({exc})") from None


def stop_cell(proc: subprocess.Popen, grace_s: float = CELL_GRACE_S) -> None:
    """SIGTERM to the cell's process group (bench stops its ranks, srun its tasks); SIGKILL after the grace.
    Ranks bench spawned die with it even then (bench.launching.supervise.die_with_parent)."""

    stop_processes([proc], grace_s)


def run_cell(cmd: list[str], log: Path, timeout_s: float | None) -> int | None:
    """Run one cell; its exit code, or None when it ran past ``timeout_s`` and was stopped. A stop signal
    to the sweep (raised as Stopped) stops the cell before it propagates."""

    env = dict(os.environ, **{SWEEP_PID_ENV: str(os.getpid())})  # the cell dies with the sweep, even by SIGKILL
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_cell(proc)
            return None
        except Stopped:
            stop_cell(proc)
            raise


def run_sweep(sweep: SweepMatrix, folder: Path, redo: bool = False, progress: bool = True,
              cell_timeout: float | None = None) -> dict[str, Any]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    if cell_timeout is not None and not cell_timeout > 0:
        raise BenchError(f"--cell-timeout must be > 0 seconds (got {cell_timeout})")
    check_output_dir(folder)
    (folder / "logs").mkdir(exist_ok=True)
    manifest = Manifest(folder, sweep)
    cells = sweep.cells()
    key = sweep.options_key()
    todo = [c for c in cells if redo or not (manifest.cell(c).status == "ok"
                                             and manifest.cell(c).options == key
                                             and (folder / str(manifest.cell(c).result)).is_file())]
    manifest.save()
    console = Console(stderr=True)
    console.print(f"sweep: {len(cells)} cells, {len(cells) - len(todo)} already done, {len(todo)} to run "
                  f"-> {folder}")
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("ETA"),
                   TimeRemainingColumn(), console=console, disable=not (progress and console.is_terminal))
    old = stop_on_signals()
    try:
        with bar:
            task = bar.add_task("cells", total=len(cells), completed=len(cells) - len(todo))
            for cell in todo:
                _run_one(cell, sweep, folder, manifest, cell_timeout, console, bar, task)
                bar.advance(task)
    finally:
        restore_handlers(old)
        console.print(summary_table(manifest, cells, folder))
    statuses = [manifest.cell(c).status for c in cells]
    summary = {s: statuses.count(s) for s in sorted(set(statuses))}
    console.print(f"sweep: done: {', '.join(f'{n} {s}' for s, n in summary.items())}; manifest {manifest.path}")
    return summary


def _run_one(cell: Cell, sweep: SweepMatrix, folder: Path, manifest: Manifest, cell_timeout: float | None,
             console, bar, task) -> None:
    entry = manifest.cell(cell)
    bar.update(task, description=cell.id)
    if not console.is_terminal:
        console.print(f"sweep: {cell.id}: running")
    log = folder / "logs" / f"{cell.id}.log"
    before = set(folder.glob("*.json"))
    start = time.time()
    entry.set(status="running", started=start, log=str(log.relative_to(folder)), error=None, exit_code=None,
              result=None, options=sweep.options_key())
    manifest.save()
    try:
        config = write_cell_config(cell, sweep.common_for(cell), folder)
        code = run_cell(command(cell, config, sweep.common.get("num_ps")), log, cell_timeout)
    except Stopped as exc:
        entry.set(status="interrupted", seconds=round(time.time() - start, 2), error=str(exc))
        manifest.save()
        raise Stopped(exc.signum, f"cell {cell.id} interrupted and its processes stopped; "
                                  f"'bench sweep --resume --output {folder}' reruns it") from None
    new = sorted(set(folder.glob("*.json")) - before - {folder / MANIFEST})
    entry.set(seconds=round(time.time() - start, 2), finished=time.time())
    if code is None:
        entry.set(status="timed_out", error=f"ran past --cell-timeout {cell_timeout:g} s; stopped")
    elif code == 0 and len(new) == 1:
        entry.set(status="ok", result=new[0].name)
    else:  # a run found not valid (NotValid) wrote its result, which says why: kept beside the failure
        entry.set(status="failed", exit_code=code, error=last_error(log),
                  result=new[0].name if code == NotValid.exit_code and len(new) == 1 else None)
    if entry.status != "ok":
        console.print(f"sweep: {cell.id} {entry.status}: {entry.error}", highlight=False)
    manifest.save()


def summary_table(manifest: Manifest, cells: list[Cell], folder: Path):
    """Every cell: status, total images/s (from its result) and seconds; the failure's line when failed."""
    from rich.table import Table

    table = Table("cell", "status", "img/s total", "seconds", "note", title=f"sweep {folder}")
    for cell in cells:
        entry = manifest.cell(cell)
        rate = ""
        if entry.status == "ok":
            try:
                rate = f"{load_result(folder / str(entry.result)).summary.samples_per_sec_total:.2f}"
            except BenchError as exc:
                rate = f"unreadable: {exc}"
        seconds = entry.seconds
        table.add_row(cell.id, entry.status, rate, "" if seconds is None else f"{seconds:.0f}",
                      (entry.error or "")[:80])
    never_cut(table, "cell")
    return table
