"""The typed result: `bench schema`, validation on write and read, schema-1 results still read, the metric registry."""

import json

import jsonschema
import pytest

from bench import SCHEMA_VERSION
from bench.errors import BenchError
from bench.records.metrics import METRICS, find
from bench.records.results import CSV_FIELDS, csv_row, load_result, write_result
from bench.records.schema import json_schema, upgrade, validate
from tests.conftest import FIXTURES

V1 = sorted((FIXTURES / "sweep-a").glob("*.json"))[0]


def upgraded() -> dict:
    return upgrade(json.loads(V1.read_text()))


def test_a_schema_1_result_reads_as_the_current_schema_with_its_headline_recomputed():
    """Schema 1 -> 2 renames; 2 -> 3 recomputes the headline from the raw window times (numbers issue, finding 7):
    every timed sample over the slowest rank's total time, never above the old mean of per-window rates."""
    from bench.measure.stats import ratio_of_totals

    old = json.loads(V1.read_text())
    assert old["schema_version"] == 1
    new = load_result(V1)
    assert new["schema_version"] == SCHEMA_VERSION == 3
    windows = old["samples"]["window_s"]
    headline, ci = ratio_of_totals(windows, len(windows) * old["samples"]["images_per_window_per_rank"])
    assert new["summary"]["samples_per_sec_total"] == pytest.approx(headline)
    assert headline <= old["summary"]["images_per_sec_total"]
    assert new["summary"]["samples_per_sec_per_gpu"] == pytest.approx(headline / old["world_size"])
    assert new["summary"]["ci95"] == (pytest.approx(ci) if ci else None)
    assert new["summary"]["ci95_kind"] == "within-run"
    assert new["samples"]["window_s"] == old["samples"]["window_s"]
    assert new["workload"]["unit"] == "image" and new["workload"]["model"] == "resnet50"
    assert new["workload"]["parameters"] == 23_528_522  # ResNet-50 at 10 classes
    jsonschema.validate(new, json_schema())


def test_a_result_that_breaks_the_schema_is_refused_in_one_line(tmp_path):
    data = upgraded()
    del data["summary"]["samples_per_sec_total"]
    with pytest.raises(BenchError, match="summary.samples_per_sec_total: Field required"):
        validate(data)
    with pytest.raises(BenchError, match="does not match the result schema"):
        write_result(tmp_path, data)
    assert not list(tmp_path.iterdir())  # nothing written


def test_csv_columns_and_table_come_from_the_metric_registry():
    assert set(METRICS) <= set(CSV_FIELDS)
    row = csv_row(upgraded())
    assert list(row) == CSV_FIELDS
    assert row["samples_per_sec_total"] == upgraded()["summary"]["samples_per_sec_total"]
    assert row["sample_unit"] == "image"
    assert find("images_per_sec_total") is METRICS["samples_per_sec_total"]  # schema-1 names still work
    with pytest.raises(BenchError, match="unknown metric"):
        find("speed")
