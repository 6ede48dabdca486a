"""The typed result: `bench schema`, validation on write and read, schema-1 results still read, the metric registry."""

import json

import jsonschema
import pytest

from bench import SCHEMA_VERSION
from bench.errors import BenchError, ResultNotWhole
from bench.records import store
from bench.records.metrics import METRICS, find
from bench.records.results import CSV_FIELDS, csv_row, load_result, write_result
from bench.records.schema import Result, json_schema, upgrade, validate
from bench.records.store import Kind
from tests import samples
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
    assert new.schema_version == SCHEMA_VERSION == 3 and new.file == str(V1)
    windows = old["samples"]["window_s"]
    headline, ci = ratio_of_totals(windows, len(windows) * old["samples"]["images_per_window_per_rank"])
    assert new.summary.samples_per_sec_total == pytest.approx(headline)
    assert headline <= old["summary"]["images_per_sec_total"]
    assert new.summary.samples_per_sec_per_gpu == pytest.approx(headline / old["world_size"])
    assert new.summary.ci95 == (pytest.approx(ci) if ci else None)
    assert new.summary.ci95_kind == "within-run"
    assert new.samples.window_s == old["samples"]["window_s"]
    assert new.workload.unit == "image" and new.workload.model == "resnet50"
    assert new.workload.parameters == 23_528_522  # ResNet-50 at 10 classes
    jsonschema.validate(new.model_dump(mode="json", by_alias=True, exclude_unset=True), json_schema())


def test_a_result_that_breaks_the_schema_is_refused_in_one_line_and_kept_in_the_fallback(tmp_path, tmp_path_factory,
                                                                                         monkeypatch):
    fallback = tmp_path_factory.mktemp("fallback")  # outside tmp_path, whose results must all match the schema
    monkeypatch.setenv("HVDBENCH_FALLBACK_DIR", str(fallback))
    out = tmp_path / "out"
    out.mkdir()
    data = upgraded()
    del data["summary"]["samples_per_sec_total"]
    with pytest.raises(BenchError, match="summary.samples_per_sec_total: Field required"):
        validate(data)
    result = Result.model_validate(upgraded())
    result.summary.samples_per_sec_total = None  # a builder's slip: an assignment is not validated, the write is
    with pytest.raises(ResultNotWhole, match="does not match its schema .summary.samples_per_sec_total") as caught:
        write_result(out, result)
    assert not list(out.iterdir())  # nothing written where a reader would find it
    kept = fallback / f"{result.run_id}.json"
    assert str(kept) in str(caught.value)  # and the measurement kept
    assert json.loads(kept.read_text()) == result.model_dump(mode="json", by_alias=True, exclude_unset=True)


def test_every_record_kind_has_a_model_that_carries_its_kind():
    """Issue 68: a schema per record kind, `bench schema KIND` for every kind of Kind."""
    titles = set()
    for kind in Kind:
        schema = json_schema(kind.value)
        titles.add(schema["title"])
        if kind is not Kind.RESULT:  # a result carries no kind; every other record names its own
            assert schema["properties"]["kind"]["const"] == kind.value, kind
    assert len(titles) == len(Kind)


def test_other_tools_can_check_every_kind_with_the_printed_json_schema():
    for kind in set(Kind) - {Kind.RESULT}:
        jsonschema.validate(samples.record(kind), json_schema(kind.value))
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**samples.record(kind), "kind": "other"}, json_schema(kind.value))


def test_the_store_checks_every_kind_before_writing(tmp_path, tmp_path_factory, monkeypatch):
    """A record of any kind that departs from its model is not written where asked, and the error names the field;
    one that matches is written and reads back."""
    monkeypatch.setenv("HVDBENCH_FALLBACK_DIR", str(tmp_path_factory.mktemp("fallback")))
    good = samples.record(Kind.PEAK)
    path = store.write(tmp_path / "peak.json", good)
    assert store.read(path, Kind.PEAK) == good
    for broken, field in (({**good, "peak_tflops": "fast"}, "peak_tflops"),
                          ({**good, "surprise": 1}, "surprise"),
                          ({**good, "kind": "tune"}, "mode"),
                          ({**good, "kind": "nonsense"}, "of no kind hvdbench keeps")):
        with pytest.raises(ResultNotWhole, match=field):
            store.write(tmp_path / "broken.json", broken)
        assert not (tmp_path / "broken.json").exists()


def test_csv_columns_and_table_come_from_the_metric_registry():
    assert set(METRICS) <= set(CSV_FIELDS)
    result = Result.model_validate(upgraded())
    row = csv_row(result)
    assert list(row) == CSV_FIELDS
    assert row["samples_per_sec_total"] == result.summary.samples_per_sec_total
    assert row["sample_unit"] == "image"
    assert find("images_per_sec_total") is METRICS["samples_per_sec_total"]  # schema-1 names still work
    with pytest.raises(BenchError, match="unknown metric"):
        find("speed")
