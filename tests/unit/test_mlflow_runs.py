"""What a result becomes as an MLflow run (bench.records.mlflow_runs), without a server: its params, metrics and
tags from a result bench wrote (tests/fixtures/trackers: torch-ddp, 2 ranks, attribution and MFU)."""

import json

import pytest

from bench.errors import BenchError
from bench.records import history, mlflow_runs
from tests.conftest import FIXTURES

RESULT = next((FIXTURES / "trackers").glob("*.json"))


@pytest.fixture(scope="module")
def record():
    return json.loads(RESULT.read_text())


def test_every_setting_is_a_param_and_long_values_are_cut_to_mlflows_limit(record):
    params = mlflow_runs.params_of(record)
    assert params["config.model"] == record["config"]["model"] and params["mode"] == "torch-ddp"
    assert params["world_size"] == "2"
    assert {k.removeprefix("config.") for k in params if k.startswith("config.")} == set(record["config"])
    long = mlflow_runs.params_of({**record, "config": {**record["config"], "extra": {"x": "y" * 7000}}})
    assert len(long["config.extra"]) == mlflow_runs.PARAM_CHARS and long["config.extra"].endswith("…")


def test_the_figures_the_windows_and_each_ranks_attribution_are_metrics(record):
    metrics = mlflow_runs.metrics_of(record)
    flat = {k: v for k, v, step in metrics if k != "window_samples_per_sec"}
    assert flat["samples_per_sec_total"] == record["summary"]["samples_per_sec_total"]
    assert [flat["ci95_low"], flat["ci95_high"]] == record["summary"]["ci95"]
    windows = [(step, v) for k, v, step in metrics if k == "window_samples_per_sec"]
    assert windows == list(enumerate(record["summary"]["windows_total_samples_per_sec"]))
    for rank in record["attribution"]["per_rank"]:
        assert flat[f"rank{rank['rank']}_exposed_s"] == rank["exposed_s"]
    assert flat["train_s"] == record["timing"]["train_s"]
    assert all(isinstance(v, float) for _, v, _ in metrics)  # no flag, list or text among them


def test_the_tags_are_where_and_on_what_it_ran(record):
    row = history.row_of(RESULT, RESULT.read_bytes())
    tags = mlflow_runs.tags_of(row)
    assert tags["hvdbench.digest"] == row.digest and tags["hvdbench.run_id"] == record["run_id"]
    assert tags["hvdbench.torch"] == record["environment"]["torch"]["version"]
    assert tags["mlflow.source.name"] == "hvdbench"
    assert "hvdbench.headline" not in tags  # figures are metrics, not tags


def test_a_record_of_another_kind_is_refused_in_one_line(tmp_path):
    path = tmp_path / "peak.json"
    path.write_text(json.dumps({"kind": "peak", "schema_version": 1, "created_utc": "2026-12-08T00:00:00+00:00"}))
    with pytest.raises(BenchError, match="only training results are logged to MLflow"):
        mlflow_runs.log("http://127.0.0.1:1", path)
