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


PROMETHEUS, NODE_EXPORTER = Path("/usr/bin/prometheus"), Path("/usr/bin/prometheus-node-exporter")


def query(port: int, expr: str) -> list[dict]:
    """Prometheus's HTTP API: an instant query's result (its series, each labels and value)."""
    import urllib.parse
    import urllib.request

    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as answer:
        body = json.loads(answer.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_prometheus_scrapes_the_textfiles_through_node_exporter(tmp_path):
    """The exported files as an operator serves them: Debian's prometheus-node-exporter with its textfile collector
    on the folder, a real Prometheus scraping it every second, and the series read back through Prometheus's HTTP
    API, labels and values as the files have them."""
    import subprocess
    import time

    missing = [p for p in (PROMETHEUS, NODE_EXPORTER) if not p.exists()]
    if missing:
        pytest.skip(f"not installed here: {', '.join(map(str, missing))} (apt-get install prometheus "
                    "prometheus-node-exporter)")
    folder, out, db = records(tmp_path / "results"), tmp_path / "textfiles", f"sqlite:///{tmp_path / 'h.db'}"
    (folder / "sweep-b" / "cut.json").unlink()
    assert bench("history", "add", str(folder), "--db", db).returncode == 0
    exported = bench("history", "export", "prometheus", str(out), "--db", db, "--stale-days", "100000")
    assert exported.returncode == 0, exported.stderr
    exporter_port, prometheus_port = free_port(), free_port()
    (tmp_path / "prometheus.yml").write_text(json.dumps({  # YAML is a superset of JSON
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [{"job_name": "node", "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}]}))
    started = [
        subprocess.Popen([str(NODE_EXPORTER), f"--web.listen-address=127.0.0.1:{exporter_port}",
                          "--collector.disable-defaults", "--collector.textfile",
                          f"--collector.textfile.directory={out}"],
                         stdout=subprocess.DEVNULL, stderr=open(tmp_path / "node-exporter.log", "w")),
        subprocess.Popen([str(PROMETHEUS), f"--config.file={tmp_path / 'prometheus.yml'}",
                          f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{prometheus_port}"],
                         stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "w"))]
    try:
        found, deadline = [], time.monotonic() + 300  # a deadlock guard: the first scrape comes within seconds
        while not found and time.monotonic() < deadline:
            assert all(p.poll() is None for p in started), (tmp_path / "prometheus.log").read_text()[-2000:]
            try:
                found = query(prometheus_port, 'hvdbench_node_accepted{job="node"}')
            except OSError:
                pass  # not listening yet
            time.sleep(0.5)
        assert [s["metric"]["node"] for s in found] == ["vm"], found
        throughput = query(prometheus_port, 'hvdbench_throughput_samples_per_second{model="resnet20",world_size="2"}')
        assert throughput and all(float(s["value"][1]) > 0 for s in throughput), throughput
        assert {s["metric"]["mode"] for s in throughput} >= {"torch-ddp"}
    finally:
        for p in started:
            p.terminate()
        for p in started:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
