"""The results database (bench.records.history) on SQLite in process: rows from real result files, adding twice,
the schema version, and bench history check's findings on series made to hold a regression, a slow node of a
fleet, a changed environment and a stale node. PostgreSQL, started for real: tests/multiproc/test_history.py."""

from datetime import datetime, timedelta, timezone

import pytest

from bench.errors import BenchError
from bench.records import history
from tests.conftest import FIXTURES

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
CELL = "torch-ddp resnet50 224x224, batch 64/device, fp32, cuda NVIDIA H100 80GB HBM3, n=8"


def run(node, day, figure, cell=CELL, **env):
    """A training run's row: ``figure`` img/s on ``node`` ``day`` days after T0."""
    base = {"driver": "580.65.06", "torch": "2.13.0", "image": "sha256:aaa", "gpu_model": "NVIDIA H100 80GB HBM3"}
    return history.Row(digest=f"{node}-{day}-{figure}-{cell}", kind="result", run_id=f"{node}-{day}",
                       time=T0 + timedelta(days=day), status="ok", node=node, cell=cell, headline=figure,
                       unit="img/s", path=f"/results/{node}-{day}.json", **{**base, **env})


# About 1% run-to-run noise, as a quiet GPU node's repeats have (docs/measured): no finding among these.
STEADY = [100.0, 101.2, 99.1, 100.4, 98.9, 100.8, 99.6, 101.0, 100.1, 99.4]


def test_a_rows_columns_come_from_the_result_file():
    path = next((FIXTURES / "trackers").glob("*.json"))
    row = history.row_of(path, path.read_bytes())
    assert (row.kind, row.node, row.status, row.mode, row.world_size) == ("result", "vm", "ok", "torch-ddp", 2)
    assert row.torch == "2.13.0+cpu" and row.horovod == "0.28.1" and row.gpu_model is None
    assert row.cell.startswith("torch-ddp resnet20 32x32, batch 8/device, fp32, cpu") and row.cell.endswith("n=2")
    assert row.headline == pytest.approx(170.99, rel=1e-3) and row.unit == "img/s"
    assert row.low < row.headline < row.high and row.path == str(path.resolve())
    assert row.time == datetime(2026, 12, 7, 18, 29, 17, tzinfo=timezone.utc)


def test_a_file_that_is_no_record_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 3, "run_id": ')
    with pytest.raises(BenchError, match="bad.json: not JSON"):
        history.row_of(bad, bad.read_bytes())
    bad.write_text('{"name": "not ours"}')
    with pytest.raises(BenchError, match="bad.json: not a record of hvdbench"):
        history.row_of(bad, bad.read_bytes())


def test_adding_the_same_file_twice_keeps_one_row(tmp_path):
    db = history.Database(f"sqlite:///{tmp_path / 'h.db'}")
    rows = [history.row_of(p, p.read_bytes()) for p in sorted((FIXTURES / "sweep-a").glob("*.json"))]
    assert db.add(rows) == (len(rows), 0)
    assert db.add(rows) == (0, len(rows))
    back = db.rows(kind="result")
    assert [r.digest for r in back] == [r.digest for r in sorted(rows, key=lambda r: r.time)]
    assert back[0] == sorted(rows, key=lambda r: r.time)[0]  # every column as it went in, the time in UTC
    assert history.Database(f"sqlite:///{tmp_path / 'h.db'}").rows(node="vm", mode="torch-ddp")


def test_a_database_of_another_schema_version_is_refused_and_left_as_it_is(tmp_path):
    import sqlalchemy as sa

    url = f"sqlite:///{tmp_path / 'h.db'}"
    db = history.Database(url)
    with db.engine.begin() as con:
        con.execute(sa.update(db.meta).values(value="99"))
    with pytest.raises(BenchError, match="is of schema version 99; this bench reads version 1"):
        history.Database(url)
    other = tmp_path / "other.db"
    with sa.create_engine(f"sqlite:///{other}").begin() as con:
        con.execute(sa.text("create table people (name text)"))
    with pytest.raises(BenchError, match="holds tables that are not a results database of hvdbench \\(people\\)"):
        history.Database(f"sqlite:///{other}")


def test_an_unreachable_database_is_one_line():
    with pytest.raises(BenchError, match="cannot open the results database at sqlite:////nonexistent/dir/h.db"):
        history.Database("sqlite:////nonexistent/dir/h.db")
    with pytest.raises(BenchError, match="not a database URL bench can open"):
        history.Database("nosuchdb://x")


def test_the_url_comes_from_the_option_the_environment_or_the_results_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(history.ENV, raising=False)
    assert history.url_of(None, tmp_path) == f"sqlite:///{tmp_path / 'history.db'}"
    monkeypatch.setenv(history.ENV, "postgresql://bench@db1/hvdbench")
    assert history.url_of(None, tmp_path) == "postgresql+psycopg://bench@db1/hvdbench"
    assert history.url_of("sqlite:///x.db", tmp_path) == "sqlite:///x.db"
    assert history.shown("postgresql+psycopg://bench:secret@db1/h") == "postgresql+psycopg://bench:***@db1/h"


def now_after(rows):
    return max(r.time for r in rows) + timedelta(hours=1)


def test_steady_runs_give_no_finding():
    rows = [run("gpu01", day, figure) for day, figure in enumerate(STEADY + [100.3])]
    assert history.check(rows, now_after(rows)) == []


@pytest.mark.parametrize("newest, severity", [(99.0, None), (94.0, "warning"), (88.0, "error")])
def test_the_newest_run_is_held_to_the_median_of_its_own_past(newest, severity):
    rows = [run("gpu01", day, figure) for day, figure in enumerate(STEADY)] + [run("gpu01", 10, newest)]
    found = history.check(rows, now_after(rows))
    assert [(f.severity, f.where, f.name, f.against) for f in found] == (
        [] if severity is None else [(severity, "gpu01", "below-own-past", "baseline")])
    if found:
        assert found[0].expected == pytest.approx(100.05) and found[0].figure == newest
        assert f"{1 - newest / 100.05:.1%} lower" in found[0].rule and "median of its 10 runs before" in found[0].rule


def test_what_changed_since_the_run_before_is_named_beside_the_finding():
    rows = [run("gpu01", day, figure) for day, figure in enumerate(STEADY)]
    rows.append(run("gpu01", 10, 85.0, driver="590.10", image="sha256:bbb"))
    (finding,) = history.check(rows, now_after(rows))
    assert finding.why == "driver 580.65.06 -> 590.10; image sha256:aaa -> sha256:bbb"


def test_only_the_last_n_runs_make_the_past():
    """A node that was slower long ago and steady since: held to its recent runs, not to the old ones."""
    old = [run("gpu01", day, 80.0) for day in range(10)]
    recent = [run("gpu01", 10 + day, figure) for day, figure in enumerate(STEADY)]
    rows = old + recent + [run("gpu01", 20, 99.0)]
    assert history.check(rows, now_after(rows), history.Limits(last=10)) == []
    assert [f.name for f in history.check(rows[-12:], now_after(rows), history.Limits(last=10))] == []


def test_a_node_slower_than_the_fleets_same_gpus_is_found_and_other_cells_are_apart():
    rows = [run(node, 0, figure) for node, figure in (("gpu01", 100.0), ("gpu02", 101.0), ("gpu03", 99.5),
                                                      ("gpu04", 87.0))]
    rows.append(run("cpu01", 0, 10.0, cell="torch-ddp resnet20 32x32, batch 8/device, fp32, cpu, n=2",
                    gpu_model=None))
    found = history.check(rows, now_after(rows))
    assert [(f.severity, f.where, f.name, f.against) for f in found] == [("error", "gpu04", "below-fleet", "peers")]
    assert found[0].expected == 100.0 and "the 3 other nodes' newest on NVIDIA H100 80GB HBM3" in found[0].rule


def test_a_node_with_no_record_for_days_is_stale():
    rows = [run("gpu01", 0, 100.0), run("gpu02", 9, 100.0)]
    found = history.check(rows, T0 + timedelta(days=9, hours=1), history.Limits(stale_days=7))
    assert [(f.severity, f.where, f.name) for f in found] == [("warning", "gpu01", "stale")]
    assert "no record for 9.0 days" in found[0].rule


def test_failed_runs_and_other_kinds_are_not_a_nodes_figure():
    rows = [run("gpu01", day, figure) for day, figure in enumerate(STEADY)]
    rows.append(history.Row(**{**run("gpu01", 10, 5.0).model_dump(), "status": "failed", "digest": "f"}))
    rows.append(history.Row(**{**run("gpu01", 11, 5.0).model_dump(), "kind": "allreduce", "digest": "a"}))
    assert history.check(rows, now_after(rows)) == []
