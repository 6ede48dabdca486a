"""bench history as users run it, on SQLite and on a real PostgreSQL 15 that the test starts (tools/postgres.py:
Debian's package, initdb and pg_ctl in a temporary folder, a free port on 127.0.0.1), the same steps on both: add
(twice, and with a corrupt file among the records), show, check (its exit status) and export prometheus (read back
by prometheus_client's own parser)."""

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, bench
from tools.postgres import Missing, free_port, server

pytestmark = pytest.mark.multiproc


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL 15 server of its own (tools/postgres.py), stopped after the module; its URL."""
    try:
        with server() as url:
            yield url
    except Missing as exc:
        pytest.skip(str(exc))


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    return f"sqlite:///{tmp_path / 'history.db'}" if request.param == "sqlite" else request.getfixturevalue(
        "postgres")


def records(folder: Path) -> Path:
    """The checked-in results of two sweeps and a --data run, a sweep's manifest (no record) and one truncated
    result among them."""
    for name in ("sweep-a", "sweep-b", "trackers"):
        shutil.copytree(FIXTURES / name, folder / name)
    (folder / "sweep-a" / "manifest.json").write_text(json.dumps({"cells": []}))
    (folder / "sweep-b" / "cut.json").write_text('{"schema_version": 3, "run_id": "20261207T000000Z-x", "mo')
    return folder


def test_add_show_check_and_export_on_each_database(db, tmp_path):
    folder = records(tmp_path / "results")
    first = bench("history", "add", str(folder), "--db", db)
    assert first.returncode == 1, first.stderr  # the truncated file: named, the others added
    bad = [line for line in first.stderr.splitlines() if line.startswith("warning: not added:")]
    assert len(bad) == 1 and "cut.json: not JSON" in bad[0]
    total = len([p for p in folder.rglob("*.json") if p.name not in ("manifest.json", "cut.json")])
    assert f"history: {total} added, 0 already there, 1 not read, 1 not records" in first.stdout
    (folder / "sweep-b" / "cut.json").unlink()
    again = bench("history", "add", str(folder), "--db", db)
    assert again.returncode == 0 and f"history: 0 added, {total} already there" in again.stdout, again.stderr

    shown = bench("history", "show", "--db", db, "--node", "vm", "--cell", "torch-ddp resnet20",
                  "--plot", str(tmp_path / "h.png"))
    assert shown.returncode == 0, shown.stderr
    assert "vm: torch-ddp resnet20 32x32" in shown.stdout and "(first)" in shown.stdout
    assert (tmp_path / "h.png").stat().st_size > 5000

    checked = bench("history", "check", "--db", db, "--stale-days", "100000")
    assert checked.returncode in (0, 3), checked.stderr
    assert "history check:" in checked.stderr

    out = tmp_path / "textfiles"
    exported = bench("history", "export", "prometheus", str(out), "--db", db, "--stale-days", "100000")
    assert exported.returncode == 0, exported.stderr
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families((out / "hvdbench_vm.prom").read_text())}
    throughput = families["hvdbench_throughput_samples_per_second"].samples
    assert any(s.labels["model"] == "resnet20" and s.labels["world_size"] == "2" and s.value > 0 for s in throughput)
    assert [s.value for s in families["hvdbench_node_accepted"].samples] == [0.0 if checked.returncode else 1.0]


def test_a_database_that_is_down_is_one_line(tmp_path):
    r = bench("history", "check", "--db", f"postgresql://bench@127.0.0.1:{free_port()}/postgres")
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 1 and len(lines) == 1 and "cannot open the results database" in lines[0], r.stderr
    r = bench("history", "show", "--results", str(tmp_path))
    assert r.returncode == 1 and "no results database at" in r.stderr and "bench history add" in r.stderr
