"""The results database: an index of the records bench wrote, for their history (docs/history.md).

The JSON files stay the source of truth. The database keeps, per record file, what a history needs: when and where
it ran, on which GPUs, drivers, libraries and image, the cell it belongs to, its headline figure and interval, and
the path to the file. ``bench history add FOLDER...`` builds it from the files and can rebuild it at any time: a
file's row is keyed by its content's digest, so adding the same file again (or a copy) changes nothing.

Where it is: SQLite in the results folder (``history.db``: nothing to start), or the database a URL names (``--db``
or ``HVDBENCH_DB``: ``postgresql://user@host/db`` through psycopg 3). Its columns are :class:`Row`'s fields, declared
once: the SQLAlchemy table is made from them, and the database records its schema version; a database of another
version is refused with one line, never written to.

The headline a kind of record contributes (:data:`HEADLINES`): a training run's throughput (samples/s over the
timed windows, with the run's own 95% interval). Records of the other kinds (verify, allreduce, diagnose, preflight,
peak, soak, data bench, converge, tune) are indexed with their time, node and environment and no headline yet.
"""

from __future__ import annotations

import hashlib
import os
import types
import typing
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from bench.errors import BenchError
from bench.records.collect import key_of
from bench.records.metrics import sample_symbol
from bench.records.results import upgraded
from bench.records.schema import Finding, hosts_in
from bench.records.store import kind_of

SCHEMA_VERSION = 1
DEFAULT_FILE = "history.db"
ENV = "HVDBENCH_DB"


class Row(BaseModel):
    """One record file in the database: a column per field."""
    digest: str = Field(description="sha256 of the file's bytes: the row's identity (the same file twice: one row)")
    kind: str = Field(description="the record's kind (bench.records.store.Kind): result, allreduce, peak, ...")
    run_id: str | None = Field(None, description="the record's run id, where it has one")
    time: datetime = Field(description="when the record was made (its created_utc), UTC")
    status: str | None = Field(None, description="a run's status (ok, failed, ...); null for records without one")
    node: str = Field(description="the hosts the record ran on, sorted, joined by '+' (one host: its name)")
    gpu_model: str | None = Field(None, description="the GPUs' model NVML named (the first GPU's); null without one")
    gpus: str | None = Field(None, description="the GPUs' UUIDs NVML gave, comma-separated in index order")
    driver: str | None = Field(None, description="the NVIDIA driver's version")
    cuda: str | None = Field(None, description="the framework's CUDA runtime")
    nccl: str | None = Field(None, description="the NCCL the framework loaded")
    torch: str | None = None
    tensorflow: str | None = None
    horovod: str | None = None
    image: str | None = Field(None, description="the image's digest (or its tag where no digest was known)")
    mode: str | None = None
    model: str | None = None
    precision: str | None = None
    batch_size: int | None = None
    world_size: int | None = None
    profile: str | None = None
    cell: str | None = Field(None, description="what must be equal for two records to be compared (a run's cell key "
                                               "in words, bench.records.collect.Key, with its world size)")
    headline: float | None = Field(None, description="the record's headline figure (HEADLINES)")
    unit: str | None = Field(None, description="the headline's unit")
    low: float | None = Field(None, description="the headline's 95% interval, low end, where the record has one")
    high: float | None = Field(None, description="the headline's 95% interval, high end")
    path: str = Field(description="the record file's absolute path when it was added")


def url_of(db: str | None, folder: Path | None = None) -> str:
    """The database's URL: ``db``, else $HVDBENCH_DB, else SQLite in ``folder`` (the results folder); a bare
    ``postgresql://`` URL is taken through psycopg 3."""
    url = db or os.environ.get(ENV) or ""
    if not url:
        if folder is None:
            raise BenchError(f"no results database: name one with --db URL or {ENV}, or give a results folder")
        return f"sqlite:///{(folder / DEFAULT_FILE).resolve()}"
    if url.startswith(("postgresql://", "postgres://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def shown(url: str) -> str:
    """The URL without its password, for messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL is shown as given
        return url


def _column_type(annotation: Any):
    import sqlalchemy as sa

    inner = [a for a in typing.get_args(annotation) if a is not type(None)] if isinstance(
        annotation, types.UnionType) else [annotation]
    return {str: sa.Text, int: sa.Integer, float: sa.Float, datetime: sa.DateTime(timezone=True)}[inner[0]]


def tables():
    """The SQLAlchemy tables, made from Row's fields: ``records`` and ``meta`` (the schema version)."""
    import sqlalchemy as sa

    metadata = sa.MetaData()
    columns = [sa.Column("id", sa.Integer, primary_key=True, autoincrement=True)]
    for name, field in Row.model_fields.items():
        columns.append(sa.Column(name, _column_type(field.annotation), nullable=not field.is_required(),
                                 unique=name == "digest", index=name in ("node", "cell", "time", "kind"),
                                 comment=field.description))
    records = sa.Table("records", metadata, *columns)
    meta = sa.Table("meta", metadata, sa.Column("key", sa.Text, primary_key=True), sa.Column("value", sa.Text))
    return metadata, records, meta


class Database:
    """The results database at a URL: opened (and made, where it is empty) with its schema version checked."""

    def __init__(self, url: str) -> None:
        import sqlalchemy as sa
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

        self.url = url
        try:
            self.engine = sa.create_engine(url)
            self.metadata, self.records, self.meta = tables()
            with self.engine.begin() as con:
                existing = sa.inspect(con).get_table_names()
                if "meta" in existing:
                    version = con.execute(sa.select(self.meta.c.value).where(self.meta.c.key == "schema_version")
                                          ).scalar()
                    if version != str(SCHEMA_VERSION):
                        raise BenchError(f"the results database at {shown(url)} is of schema version {version}; this "
                                         f"bench reads version {SCHEMA_VERSION} (make a new one with bench history "
                                         "add: the result files are the source)")
                elif existing:
                    raise BenchError(f"{shown(url)} holds tables that are not a results database of hvdbench "
                                     f"({', '.join(sorted(existing))})")
                else:
                    self.metadata.create_all(con)
                    con.execute(self.meta.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
        except (ArgumentError, NoSuchModuleError) as exc:
            raise BenchError(f"not a database URL bench can open: {shown(url)} ({exc})") from None
        except SQLAlchemyError as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise BenchError(f"cannot open the results database at {shown(url)}: {reason}") from None

    def add(self, rows: Iterable[Row]) -> tuple[int, int]:
        """Insert the rows not there yet (by digest): (added, already there)."""
        import sqlalchemy as sa

        added = already = 0
        with self.engine.begin() as con:
            for row in rows:
                if con.execute(sa.select(self.records.c.id).where(self.records.c.digest == row.digest)).first():
                    already += 1
                    continue
                con.execute(self.records.insert().values(**row.model_dump()))
                added += 1
        return added, already

    def rows(self, **equal: Any) -> list[Row]:
        """The rows whose columns equal ``equal``'s values (None: any), oldest first."""
        import sqlalchemy as sa

        query = sa.select(*(self.records.c[name] for name in Row.model_fields)).order_by(self.records.c.time,
                                                                                         self.records.c.id)
        for name, value in equal.items():
            if value is not None:
                query = query.where(self.records.c[name] == value)
        with self.engine.connect() as con:
            return [Row(**{**r._mapping, "time": utc(r._mapping["time"])}) for r in con.execute(query)]


def utc(when: datetime) -> datetime:
    """SQLite gives back naive datetimes: they were stored as UTC."""
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


# -- from a record file to its row --------------------------------------------------------------------------------

def _environment_columns(environment: dict[str, Any]) -> dict[str, Any]:
    nvml = environment.get("nvml") or {}
    gpus = [g for g in nvml.get("gpus") or [] if isinstance(g, dict)]
    torch, tf = environment.get("torch") or {}, environment.get("tensorflow") or {}
    framework = torch if torch.get("version") else tf
    image = environment.get("image") or {}
    hosts = hosts_in(environment) or [environment.get("hostname") or "?"]
    return {"node": "+".join(hosts), "gpu_model": gpus[0].get("name") if gpus else None,
            "gpus": ",".join(str(g.get("uuid")) for g in gpus) or None, "driver": nvml.get("driver"),
            "cuda": framework.get("cuda"), "nccl": None if framework.get("nccl") is None else str(framework["nccl"]),
            "torch": torch.get("version"), "tensorflow": tf.get("version"),
            "horovod": (environment.get("horovod") or {}).get("version")
            or (environment.get("packages") or {}).get("horovod"),
            "image": image.get("digest") or "-".join(image[k] for k in ("stack", "flavor", "version", "revision")
                                                     if image.get(k)) or None}


def _result(data: dict[str, Any], where: str) -> dict[str, Any]:
    result = upgraded(data, where)
    key = key_of(result)
    ci = result.summary.ci95 or [None, None]
    return {"mode": result.mode, "model": result.config.model, "precision": result.config.precision,
            "batch_size": result.config.batch_size, "world_size": result.world_size,
            "profile": result.config.profile, "status": result.status,
            "cell": f"{key.label} {key.setting_text()}, n={result.world_size}",
            "headline": result.summary.samples_per_sec_total, "unit": f"{sample_symbol(result)}/s",
            "low": ci[0], "high": ci[1] if len(ci) > 1 else None}


HEADLINES: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {"result": _result}


def row_of(path: Path, text: bytes) -> Row:
    """The row of a record file's bytes: a BenchError naming what is wrong for a file that is no record."""
    import json

    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BenchError(f"{path}: not JSON ({exc})") from None
    kind = kind_of(data)
    if kind is None:
        raise BenchError(f"{path}: not a record of hvdbench")
    try:
        when = datetime.fromisoformat(str(data.get("created_utc") or data.get("time") or "").replace("Z", "+00:00"))
    except ValueError:
        raise BenchError(f"{path}: no time it was made (created_utc)") from None
    columns: dict[str, Any] = _environment_columns(data.get("environment") or {})
    columns.update(HEADLINES.get(kind.value, lambda *_: {})(data, str(path)))
    return Row(digest=hashlib.sha256(text).hexdigest(), kind=kind.value, run_id=data.get("run_id"),
               time=utc(when), path=str(path.resolve()), **columns)


# -- bench history check ------------------------------------------------------------------------------------------
# Each node's newest figure of a cell against the same node's own past runs of that cell (median of up to ``last``),
# and against the fleet: the newest figure of the other nodes with the same GPU model (or CPU) in that cell. A drop
# past ``warning`` or ``error`` (fractions of the expected figure) is a finding, as bench diagnose's rules give
# them, with what changed since the node's previous run named beside it; a node with no record for ``stale_days``
# is a warning of its own. Defaults as ROCm's ATOM dashboards use them: warn at 5%, alarm at 10%.
CHANGES = ("driver", "cuda", "nccl", "torch", "tensorflow", "horovod", "image", "gpus")


class Limits(BaseModel):
    warning: float = 0.05
    error: float = 0.10
    last: int = 10
    stale_days: float = 7.0


def changed(before: Row, after: Row) -> str | None:
    """What differs between two rows' environments, in words: ``driver 550.54 -> 560.35``; None when nothing."""
    parts = [f"{name} {getattr(before, name) or '-'} -> {getattr(after, name) or '-'}" for name in CHANGES
             if getattr(before, name) != getattr(after, name)]
    return "; ".join(parts) or None


def spread(values: list[float]) -> float:
    """The median absolute deviation over the median: the past's own run-to-run spread, as a fraction."""
    import statistics

    middle = statistics.median(values)
    return statistics.median(abs(v - middle) for v in values) / middle if middle else 0.0


def _judged(figure: float, expected: float, limits: Limits) -> str | None:
    drop = 1 - figure / expected if expected else 0.0
    return "error" if drop >= limits.error else "warning" if drop >= limits.warning else None


def series(rows: list[Row]) -> dict[tuple[str, str], list[Row]]:
    """The ok training runs with a headline, by (node, cell), oldest first."""
    found: dict[tuple[str, str], list[Row]] = {}
    for r in sorted(rows, key=lambda r: r.time):
        if r.kind == "result" and r.status == "ok" and r.headline and r.cell:
            found.setdefault((r.node, r.cell), []).append(r)
    return found


def own_past(history: list[Row], last: int) -> float | None:
    """The median of the ``last`` figures before a series' newest; None for a series of one."""
    import statistics

    past = history[:-1][-last:]
    return statistics.median(r.headline for r in past) if past else None


def check(rows: list[Row], now: datetime, limits: Limits | None = None) -> list[Any]:
    """The findings (bench.records.schema.Finding) over the database's rows: see above."""
    import statistics
    from collections import defaultdict

    limits = limits or Limits()
    found: list[Finding] = []
    by_node_cell = series(rows)
    for (node, cell), history in sorted(by_node_cell.items()):
        newest, past = history[-1], history[:-1][-limits.last:]
        expected = own_past(history, limits.last)
        if expected is None:
            continue
        severity = _judged(newest.headline, expected, limits)
        if severity:
            noise = spread([r.headline for r in past])
            found.append(Finding(
                kind="node", where=node, figure=newest.headline, expected=expected, severity=severity,
                name="below-own-past", against="baseline", why=changed(past[-1], newest),
                rule=f"{cell}: {newest.headline:.4g} {newest.unit} on {newest.time:%Y-%m-%d %H:%M}Z against the "
                     f"median of its {len(past)} runs before ({expected:.4g}, spread {noise:.1%}): "
                     f"{1 - newest.headline / expected:.1%} lower (warning {limits.warning:.0%}, error "
                     f"{limits.error:.0%})"))
    newest_per_node: dict[tuple[str, str], dict[str, Row]] = defaultdict(dict)
    for (node, cell), history in by_node_cell.items():
        last_row = history[-1]
        newest_per_node[(cell, last_row.gpu_model or "cpu")][node] = last_row
    for (cell, model), nodes in sorted(newest_per_node.items()):
        for node, row in sorted(nodes.items()):
            others = [r.headline for n, r in nodes.items() if n != node]
            if len(others) < 2:
                continue
            expected = statistics.median(others)
            severity = _judged(row.headline, expected, limits)
            if severity:
                found.append(Finding(
                    kind="node", where=node, figure=row.headline, expected=expected, severity=severity,
                    name="below-fleet", against="peers", why=None,
                    rule=f"{cell}: {row.headline:.4g} {row.unit} against the median of the {len(others)} other "
                         f"nodes' newest on {model} ({expected:.4g}): {1 - row.headline / expected:.1%} lower "
                         f"(warning {limits.warning:.0%}, error {limits.error:.0%})"))
    latest: dict[str, datetime] = {}
    for r in rows:
        latest[r.node] = max(latest.get(r.node, r.time), r.time)
    for node, when in sorted(latest.items()):
        age = (now - when).total_seconds() / 86400
        if age > limits.stale_days:
            found.append(Finding(kind="node", where=node, figure=round(age, 1), expected=limits.stale_days,
                                 severity="warning", name="stale", against="value", why=None,
                                 rule=f"no record for {age:.1f} days (last {when:%Y-%m-%d %H:%M}Z; stale after "
                                      f"{limits.stale_days:g})"))
    return found
