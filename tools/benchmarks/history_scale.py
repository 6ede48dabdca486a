"""bench history add of many result files: its time and the database's size, on SQLite and on PostgreSQL.

    python -m tools.benchmarks.history_scale [--files 1000] [--nodes 20] [--repeats 3]

The files are made from one result this checkout holds (tests/fixtures/sweep-a's torch-ddp run, written by bench),
each a distinct record: its own run id, a time spread over 90 days and a node out of --nodes (every rank's host),
its figures and window times scaled by a factor of its own, so no two files have the same content. Each repeat
times, as a user runs them, `bench history add FOLDER` into an empty database (every file added) and again (every
file already there), each a process of its own (python -m bench: its start-up included), on SQLite (the results
folder's history.db) and on a PostgreSQL 15 started for it (tools/postgres.py); then the database's size: the
SQLite file, and PostgreSQL's records table with its indexes (pg_total_relation_size). Medians of --repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tools.postgres import server

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests/fixtures/sweep-a/20261121T123741Z-torch-ddp-12708fb0.json"


def make_files(folder: Path, files: int, nodes: int, rng: random.Random) -> None:
    base = json.loads(SOURCE.read_text())
    start = datetime(2026, 9, 1, tzinfo=timezone.utc)
    for i in range(files):
        record = json.loads(json.dumps(base))
        when = start + timedelta(seconds=rng.uniform(0, 90 * 86400))
        node = f"gpu{i % nodes:03d}"
        record["run_id"] = f"{when:%Y%m%dT%H%M%SZ}-torch-ddp-{i:08x}"
        record["created_utc"] = when.isoformat()
        record["environment"]["hostname"] = node
        for rank in record["environment"].get("ranks", []):
            rank["host"] = node
        factor = rng.uniform(0.9, 1.1)
        summary = record["summary"]  # the headline, its interval and its windows' rates, whatever the schema's names
        for key, value in summary.items():
            if isinstance(value, float):
                summary[key] = value * factor
            elif isinstance(value, list) and value and all(isinstance(v, float) for v in value):
                summary[key] = [v * factor for v in value]
        (folder / f"{record['run_id']}.json").write_text(json.dumps(record))


def add(folder: Path, db: str) -> tuple[float, str]:
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bench", "history", "add", str(folder), "--db", db], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
    took = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"bench history add failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return took, done.stdout.strip().splitlines()[-1]


def postgres_size(url: str) -> int:
    import sqlalchemy as sa

    from bench.records.history import url_of

    engine = sa.create_engine(url_of(url))
    with engine.connect() as con:
        size = con.execute(sa.text("SELECT pg_total_relation_size('records')")).scalar()
        con.execute(sa.text("DROP TABLE records, meta"))
        con.commit()
    engine.dispose()
    return int(size)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--nodes", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hvdbench-history-scale-"))
    folder = work / "results"
    folder.mkdir()
    make_files(folder, args.files, args.nodes, random.Random(0))
    data = sum(f.stat().st_size for f in folder.iterdir())
    found: dict[str, dict[str, list]] = {"SQLite": {"first": [], "again": [], "size": []},
                                         "PostgreSQL 15": {"first": [], "again": [], "size": []}}
    with server() as pg_url:
        for repeat in range(args.repeats):
            for name in found:  # alternated
                sqlite = work / f"history-{repeat}.db"
                url = f"sqlite:///{sqlite}" if name == "SQLite" else pg_url
                first, said = add(folder, url)
                assert f"{args.files} added" in said, said
                again, said = add(folder, url)
                assert f"{args.files} already there" in said, said
                found[name]["first"].append(first)
                found[name]["again"].append(again)
                found[name]["size"].append(sqlite.stat().st_size if name == "SQLite" else postgres_size(url))
    table = Table("database", "bench history add (all new), s", "files/s", "again (all there), s",
                  "database size, MB", "bytes per record",
                  title=f"{args.files} result files ({data / 1e6:.1f} MB of JSON, {args.nodes} nodes), median of "
                        f"{args.repeats}")
    for name, f in found.items():
        first, size = statistics.median(f["first"]), statistics.median(f["size"])
        table.add_row(name, f"{first:.1f}", f"{args.files / first:.0f}", f"{statistics.median(f['again']):.1f}",
                      f"{size / 1e6:.2f}", f"{size / args.files:.0f}")
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
