"""The one record store (bench.records.store): every record kind named once, written and read one way."""

import errno
import json
import re

import pytest

from bench.errors import BenchError, ResultNotWhole
from bench.records import store
from bench.records.header import header, new_run_id
from tests import samples
from tests.conftest import ROOT

BENCH = ROOT / "bench"


def test_every_kind_round_trips_and_is_named_by_its_header(tmp_path):
    result = header(new_run_id("torch-ddp"))
    assert "kind" not in result and store.kind_of(result) is store.Kind.RESULT  # a result's file has no kind
    for kind in set(store.Kind) - {store.Kind.RESULT}:  # (a stand-in result here would fail the results check)
        record = samples.record(kind)
        path = store.write(tmp_path / f"{kind.value}.json", record)
        assert store.read(path, kind) == record and store.kind_of(record) is kind
    with pytest.raises(BenchError, match="already exists; not overwritten"):
        store.write(tmp_path / "peak.json", samples.record(store.Kind.PEAK))
    with pytest.raises(BenchError, match="is not a record of kind allreduce \\(it is of kind peak\\)"):
        store.read(tmp_path / "peak.json", store.Kind.ALLREDUCE)
    (tmp_path / "foreign.json").write_text(json.dumps({"kind": "something else"}))
    with pytest.raises(BenchError, match="is not a record of hvdbench"):
        store.read(tmp_path / "foreign.json")
    with pytest.raises(BenchError, match="cannot read"):
        store.read(tmp_path / "missing.json")


def test_a_record_reads_back_as_its_kinds_model_or_one_line_saying_where_it_departs(tmp_path):
    from bench.records.kinds import Allreduce, Peak
    from bench.records.schema import record_model

    for kind in set(store.Kind) - {store.Kind.RESULT}:
        model = record_model(kind.value)
        written = model.model_validate(samples.record(kind))
        path = store.write(tmp_path / f"{kind.value}.json", written)  # a model is written as its content
        assert store.load(path, model) == written
    with pytest.raises(BenchError, match="is not a record of kind allreduce"):
        store.load(tmp_path / "peak.json", Allreduce)
    broken = {k: v for k, v in samples.record(store.Kind.PEAK).items() if k != "peak_tflops"}
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(BenchError, match="broken.json does not match its schema \\(hvdbench peak record\\): "
                                         "peak_tflops: Field required"):
        store.load(tmp_path / "broken.json", Peak)


def test_a_record_the_folder_refuses_goes_to_the_fallback(tmp_path, monkeypatch):
    from bench import files

    def full(path, text):
        if "spare" not in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, text)

    real = files.write_new
    monkeypatch.setattr(files, "write_new", full)
    monkeypatch.setenv("HVDBENCH_FALLBACK_DIR", str(tmp_path / "spare"))
    record = samples.record(store.Kind.DIAGNOSE)
    with pytest.raises(ResultNotWhole, match="No space left on device.*saved to .*spare/diagnose.json instead"):
        store.write(tmp_path / "out" / "diagnose.json", record)
    assert json.loads((tmp_path / "spare" / "diagnose.json").read_text()) == record


def test_no_record_is_written_past_the_store():
    """Gate issue, item 4: records were written three ways (two without the fallback). A JSON record written
    with files.write_new anywhere but the store would skip its naming, its refusal to overwrite and its fallback."""
    offenders = []
    for path in BENCH.rglob("*.py"):
        if path.name == "store.py":
            continue
        text = path.read_text()
        if re.search(r"files\.write_new\([^)]*json\.dumps", text) or re.search(r"write_json_new", text):
            offenders.append(str(path.relative_to(BENCH)))
    assert offenders == []
