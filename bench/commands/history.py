"""bench history: the results database over time (docs/history.md).

    bench history add results/ /shared/hvdbench/results    # index the record files (again: nothing changes)
    bench history show --node gpu07                         # a node's figures over time, versions marked
    bench history check                                     # each node against its own past and the fleet
    bench history export prometheus /var/lib/node_exporter/textfile_collector

The database is bench.records.history's: SQLite in the results folder unless --db or HVDBENCH_DB names another
(postgresql://...). SQLAlchemy, psycopg and prometheus_client are imported here, by these commands only.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from bench.commands.diagnose import FINDINGS_EXIT
from bench.commands.diagnose.render import finding_rows
from bench.commands.diagnose.rules import accept
from bench.config import option
from bench.errors import BenchError, check_exit_codes, judged, nagios
from bench.records import history, mlflow_runs
from bench.records.store import kind_of
from bench.tables import never_cut

DB_HELP = ("The results database: a SQLAlchemy URL (sqlite:///file.db, postgresql://user@host/db); default "
           "$HVDBENCH_DB, else history.db in --results.")
RESULTS_HELP = "The results folder whose history.db is the default database."


def database(db: str | None, results: str, create: bool = False):
    """The database the options name; one line where it cannot be opened, or where a SQLite file to read does not
    exist yet (``create``: bench history add makes it)."""

    url = history.url_of(db, Path(results))
    file = Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None
    if file is not None and not file.is_file():
        if not create:
            raise BenchError(f"no results database at {file}: bench history add FOLDER... makes one (or name one "
                             "with --db)")
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BenchError(f"cannot make the folder of {file}: {exc.strerror or exc}") from None
    return history.Database(url)


@dataclass(frozen=True)
class HistoryAddConfig:
    """bench history add's configuration: each option declared once, here (the command's flags come from it)."""
    paths: list[str] | None = option(None, "Record files or folders (searched for *.json, in sub-folders too).",
                                     argument=True)
    db: str | None = option(None, DB_HELP)
    results: str = option("results", RESULTS_HELP)

    def __post_init__(self) -> None:
        if not self.paths:
            raise BenchError("bench history add takes record files or folders: bench history add PATH...")
        missing = [p for p in self.paths if not Path(p).exists()]
        if missing:
            raise BenchError(f"no such file or folder: {', '.join(missing)}")


def record_files(paths: list[str]) -> list[Path]:
    found = []
    for p in map(Path, paths):
        found += sorted(p.rglob("*.json")) if p.is_dir() else [p]
    return found


def add(cfg: HistoryAddConfig) -> int:
    """Index every record file under the paths: each file one row, by its content (again: already there). A file
    that is not a record of bench (a sweep's manifest, another tool's JSON) is passed over; one that should be
    and cannot be read (truncated, invalid) is named on one line each, the others are added, and the exit is 1."""
    import json


    rows, bad, foreign = [], [], 0
    for path in record_files(cfg.paths):
        try:
            text = path.read_bytes()
        except OSError as exc:
            bad.append(f"{path}: {exc.strerror or exc}")
            continue
        try:
            if kind_of(json.loads(text)) is None:
                foreign += 1
                continue
        except (UnicodeDecodeError, json.JSONDecodeError):
            pass  # row_of names it
        try:
            rows.append(history.row_of(path, text))
        except BenchError as exc:
            bad.append(str(exc))
    db = database(cfg.db, cfg.results, create=True)
    added, already = db.add(rows)
    for line in bad:
        print(f"warning: not added: {line}", file=sys.stderr)
    print(f"history: {added} added, {already} already there, {len(bad)} not read, {foreign} not records, in "
          f"{history.shown(db.url)}")
    return 1 if bad else 0


@dataclass(frozen=True)
class HistoryShowConfig:
    """bench history show's configuration."""
    node: str | None = option(None, "Only this node's records (a multi-node run's node is its hosts joined by +).")
    gpu: str | None = option(None, "Only the records of the runs on this GPU (a UUID, as NVML gives it).")
    cell: str | None = option(None, "Only the records whose cell holds these words (mode, model, batch...).")
    kind: str = option("result", "The record kind: result (training runs), allreduce, peak, soak, ...")
    plot: str | None = option(None, "Also draw the figures over time into this PNG (one line per node and cell).")
    db: str | None = option(None, DB_HELP)
    results: str = option("results", RESULTS_HELP)


def show(cfg: HistoryShowConfig) -> None:
    """The records' figures over time, oldest first, with the versions that changed since the row before marked."""
    from rich.console import Console
    from rich.table import Table


    rows = [r for r in database(cfg.db, cfg.results).rows(kind=cfg.kind, node=cfg.node)
            if (cfg.gpu is None or cfg.gpu in (r.gpus or "").split(","))
            and (cfg.cell is None or all(word in (r.cell or "") for word in cfg.cell.split()))]
    if not rows:
        raise BenchError("no record in the database matches (bench history show --help: the filters)")
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault((r.node, r.cell or "-"), []).append(r)
    console = Console()
    for (node, cell), series in sorted(groups.items()):
        table = Table("time (UTC)", "figure", "95% interval", "changed since the run before",
                      title=f"{node}: {cell} ({cfg.kind} records: {len(series)})")
        for before, r in zip([None, *series], series, strict=False):
            change = history.changed(before, r) if before is not None else "(first)"
            interval = f"{r.low:.4g}-{'inf' if r.high is None else f'{r.high:.4g}'}" if r.low is not None else "-"
            figure = f"{r.headline:.4g} {r.unit}" if r.headline is not None else "-"
            table.add_row(f"{r.time:%Y-%m-%d %H:%M}", figure, interval, change or "")
        console.print(never_cut(table, "changed since the run before"))
    if cfg.plot:
        print(f"history: plot {plot(rows, Path(cfg.plot))}")


def plot(rows: list, path: Path) -> Path:
    """The figures over time, one line per node and cell, a vertical mark where the environment changed, in
    bench report's style (matplotlib, written whole)."""
    import matplotlib


    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    groups: dict[tuple, list] = {}
    for r in rows:
        if r.headline is not None:
            groups.setdefault((r.node, r.cell), []).append(r)
    for (node, cell), series in sorted(groups.items(), key=lambda kv: str(kv[0])):
        line, = ax.plot([r.time for r in series], [r.headline for r in series], marker="o", label=f"{node}: {cell}")
        for before, after in zip(series, series[1:], strict=False):
            if history.changed(before, after):
                ax.axvline(after.time, color=line.get_color(), linestyle=":", linewidth=1)
    ax.set_ylabel(f"{rows[0].unit or 'figure'} (dotted: the environment changed)")
    ax.set_xlabel("time (UTC)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    fig.autofmt_xdate()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


@dataclass(frozen=True)
class HistoryCheckConfig:
    """bench history check's configuration."""
    last: int = option(10, "Hold each node's newest figure of a cell against the median of its last N before.",
                       minimum=1)
    warning: float = option(5.0, "A drop of this many percent (from its own past or the fleet's median) is a warning.")
    error: float = option(10.0, "A drop of this many percent is an error.")
    stale_days: float = option(7.0, "A node with no record for this many days is a warning.")
    exit_codes: str = option("bench", "Exit statuses: bench (3 on an error finding, as bench diagnose; 1 when it "
                                      "could not check), or nagios (0 ok, 1 a warning, 2 an error, 3 could not check).")
    db: str | None = option(None, DB_HELP)
    results: str = option("results", RESULTS_HELP)

    def __post_init__(self) -> None:
        check_exit_codes(self.exit_codes)
        if not 0 < self.warning <= self.error:
            raise BenchError(f"--warning ({self.warning:g}) must be above 0 and at most --error ({self.error:g})")


def check(cfg: HistoryCheckConfig) -> int:
    return judged(lambda: _check(cfg), cfg.exit_codes)


def _check(cfg: HistoryCheckConfig) -> int:
    from rich.console import Console
    from rich.table import Table


    db = database(cfg.db, cfg.results)
    limits = history.Limits(warning=cfg.warning / 100, error=cfg.error / 100, last=cfg.last,
                            stale_days=cfg.stale_days)
    found = history.check(db.rows(), datetime.now(timezone.utc), limits)
    errors = sum(f.severity == "error" for f in found)
    if found:
        table = Table("severity", "kind", "where", "figure", "expected", "rule", "what changed",
                      title=f"bench history check ({history.shown(db.url)})")
        for row in finding_rows(found):
            table.add_row(*row)
        Console().print(never_cut(table, "rule", "what changed"))
    print(f"history check: {errors} error(s), {len(found) - errors} warning(s)", file=sys.stderr)
    if cfg.exit_codes == "nagios":
        return nagios(errors, len(found) - errors)
    return FINDINGS_EXIT if errors else 0


EXPORTS = ("prometheus", "mlflow")


@dataclass(frozen=True)
class HistoryExportConfig:
    """bench history export's configuration."""
    target: str = option("", "Where to: prometheus (one text file per node for node_exporter's textfile "
                             "collector), or mlflow (each training run as an MLflow run).", argument=True)
    destination: str = option("", "prometheus: the textfile collector's folder; mlflow: the tracking server's URI.",
                              argument=True)
    experiment: str = option("hvdbench", "mlflow: the experiment the runs go in (made where missing).")
    last: int = option(10, "The own past each newest figure is held against: the median of its last N before.",
                       minimum=1)
    warning: float = option(5.0, "As bench history check's --warning.")
    error: float = option(10.0, "As bench history check's --error.")
    stale_days: float = option(7.0, "As bench history check's --stale-days.")
    db: str | None = option(None, DB_HELP)
    results: str = option("results", RESULTS_HELP)

    def __post_init__(self) -> None:
        if self.target not in EXPORTS:
            raise BenchError(f"bench history export takes {' or '.join(EXPORTS)} and a destination (got "
                             f"'{self.target}')")
        if not self.destination:
            raise BenchError(f"bench history export {self.target} DESTINATION: "
                             f"{'the folder to write to' if self.target == 'prometheus' else 'the tracking URI'}")


# The metrics' names follow Prometheus's conventions (https://prometheus.io/docs/practices/naming/): the
# application's prefix, base units in the name (seconds, a ratio), gauges without _total.
PREFIX = "hvdbench"


def export(cfg: HistoryExportConfig) -> int:
    return export_mlflow(cfg) if cfg.target == "mlflow" else export_prometheus(cfg)


def export_mlflow(cfg: HistoryExportConfig) -> int:
    """Every training run of the database whose file is still where it was added, as an MLflow run
    (bench.records.mlflow_runs; one already there is not logged again). A file gone is named on one line each and
    the exit status is 1; a server that cannot be reached stops the export at its first run, with one line."""
    rows = [r for r in database(cfg.db, cfg.results).rows(kind="result")]
    logged = already = 0
    gone = []
    for row in rows:
        path = Path(row.path)
        if not path.is_file():
            gone.append(row.path)
            continue
        _, new = mlflow_runs.log(cfg.destination, path, cfg.experiment)
        logged, already = logged + new, already + (not new)
    for name in gone:
        print(f"warning: not logged: {name}: no such file (moved since it was added?)", file=sys.stderr)
    print(f"history: {logged} run(s) logged to MLflow, {already} already there, {len(gone)} file(s) gone, in "
          f"experiment {cfg.experiment} at {history.shown(cfg.destination)}")
    return 1 if gone else 0


def export_prometheus(cfg: HistoryExportConfig) -> int:
    """One file per node, DESTINATION/hvdbench_<node>.prom, written whole (a temporary file renamed over it, as the
    textfile collector asks): each cell's newest figure, its ratio to the node's own past median, the findings of
    bench history check by severity, the time of the node's newest record and whether the node is accepted (no
    error finding)."""
    import re

    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

    rows = database(cfg.db, cfg.results).rows()
    limits = history.Limits(warning=cfg.warning / 100, error=cfg.error / 100, last=cfg.last,
                            stale_days=cfg.stale_days)
    found = history.check(rows, datetime.now(timezone.utc), limits)
    nodes = sorted({r.node for r in rows})
    verdicts = {a.node: a for a in accept(nodes, found)}
    out = Path(cfg.destination)
    out.mkdir(parents=True, exist_ok=True)
    cells = history.series(rows)
    labels = ["node", "gpu_model", "mode", "model", "precision", "world_size", "cell"]
    for node in nodes:
        registry = CollectorRegistry()
        figure = Gauge(f"{PREFIX}_throughput_samples_per_second", "The newest training run's throughput of each "
                       "cell on this node (samples/s over its timed windows, all ranks).", labels, registry=registry)
        ratio = Gauge(f"{PREFIX}_throughput_own_past_ratio", "The newest figure over the median of the node's last "
                      f"{cfg.last} runs of the cell before it (1: as before).", labels, registry=registry)
        findings = Gauge(f"{PREFIX}_history_findings", "bench history check's findings on this node, by severity.",
                         ["node", "severity"], registry=registry)
        newest = Gauge(f"{PREFIX}_last_record_timestamp_seconds", "When the node's newest record was made (Unix "
                       "time).", ["node"], registry=registry)
        accepted = Gauge(f"{PREFIX}_node_accepted", "1 when no error finding names the node, else 0.", ["node"],
                         registry=registry)
        for (where, cell), series in sorted(cells.items()):
            if where != node:
                continue
            r = series[-1]
            values = [node, r.gpu_model or "cpu", r.mode or "", r.model or "", r.precision or "",
                      str(r.world_size or ""), cell]
            figure.labels(*values).set(r.headline)
            past = history.own_past(series, cfg.last)
            if past:
                ratio.labels(*values).set(r.headline / past)
        for severity in ("error", "warning"):
            findings.labels(node, severity).set(sum(f.where == node and f.severity == severity for f in found))
        newest.labels(node).set(max(r.time for r in rows if r.node == node).timestamp())
        accepted.labels(node).set(1 if verdicts[node].accepted else 0)
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", node)
        write_to_textfile(str(out / f"{PREFIX}_{name}.prom"), registry)
    print(f"history: {len(nodes)} node file(s) in {out}")
    return 0
