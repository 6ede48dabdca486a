"""bench soak as a user runs it on a node with no GPU: its CPU form, the record it writes, what it says it could not
measure, and its bad input in one line (issue 95)."""

import json

from bench.records import store
from bench.records.kinds import Soak
from tests.conftest import bench


def test_the_cpu_form_writes_its_record_and_names_what_it_could_not_measure(tmp_path):
    r = bench("soak", "--device", "cpu", "--seconds", "2", "--window", "0.5", "--size", "256", "--output",
              str(tmp_path), "--json", "--node-patch", str(tmp_path / "labels"), "--node", "cpu-node-1")
    assert r.returncode == 0, r.stderr  # a rate that wavers on a busy machine is a warning, never an error
    found = {f["check"]: f for f in json.loads(r.stdout)}
    for check in ("throttle", "temperature", "power", "ecc"):
        assert found[check]["status"] == "n/a" and "a CPU soak" in found[check]["detail"], found[check]
    assert found["result"]["status"] == "ok"
    (path,) = (tmp_path / "soak").glob("*.json")
    record = store.load(path, Soak)
    assert record.passed and record.devices[0].digest_before == record.devices[0].digest_after
    assert len(record.devices[0].window_tflops) == 4 and f"record: {path}" in r.stderr
    patch = json.loads((tmp_path / "labels" / "cpu-node-1-soak.json").read_text())
    warned = any(f.status == "warning" for f in record.findings)
    assert patch["metadata"]["labels"]["hvdbench.io/soak"] == ("warning" if warned else "pass")
    assert f"(record: {path})" in patch["metadata"]["annotations"]["hvdbench.io/soak"]
    assert "kubectl taint node cpu-node-1 hvdbench.io/soak:NoSchedule-" in r.stderr
    schema = bench("schema", "soak")
    assert schema.returncode == 0 and json.loads(schema.stdout)["title"] == "hvdbench soak record"


def test_a_soak_of_no_time_is_one_line_and_writes_nothing(tmp_path):
    r = bench("soak", "--device", "cpu", "--seconds", "0", "--output", str(tmp_path))
    assert r.returncode == 1 and r.stderr.strip() == "error: --seconds must be > 0 seconds (got 0.0)", r.stderr
    assert not (tmp_path / "soak").exists()
