"""The typed result: `bench schema`, validation on write and read, schema-1 results still read, the metric registry."""

import json
import shutil

import jsonschema

from bench.records.schema import json_schema, upgrade
from tests.conftest import FIXTURES, bench


def test_bench_schema_prints_the_json_schema():
    out = bench("schema")
    assert out.returncode == 0, out.stderr
    schema = json.loads(out.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["title"] == "hvdbench result"
    assert {"workload", "summary", "samples", "sync", "schema_version"} <= set(schema["required"])
    assert schema == json_schema()
    out = bench("schema", "tune")  # any other record kind by name (issue 68)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == json_schema("tune") and json.loads(out.stdout)["title"] == "hvdbench tune record"


def test_results_of_older_schemas_report_together(tmp_path):
    folder = tmp_path / "mixed"
    shutil.copytree(FIXTURES / "sweep-a", folder)
    newest = sorted(folder.glob("*.json"))[-1]
    newest.write_text(json.dumps(upgrade(json.loads(newest.read_text()))))  # one result in the current schema
    out = bench("report", str(folder))
    assert out.returncode == 0, out.stderr
    assert "img/s total" in (folder / "report.md").read_text()


def test_compare_takes_schema_1_metric_names(tmp_path):
    out = bench("compare", str(FIXTURES / "sweep-a"), str(FIXTURES / "sweep-b"), "--metric", "images_per_sec_total",
                "--max-regression", "1000")
    assert out.returncode == 0, out.stderr
