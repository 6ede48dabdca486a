"""bench tune end to end on the CPU: doubling batches as sweep cells, the knee, the record; a rerun resumes."""

import json

import pytest

from bench.records import store
from tests.conftest import bench


def test_tune_doubles_the_batch_to_the_knee_and_a_rerun_runs_nothing_again(tmp_path):
    out = tmp_path / "tune"
    args = ["tune", "torch-single", "--model", "resnet20", "--start", "2", "--max-batch", "8", "--device", "cpu",
            "--image-size", "32", "--warmup-steps", "1", "--steps-per-window", "2", "--windows", "2",
            "--output", str(out)]
    r = bench(*args, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = [p for p in out.glob("*.json") if store.kind_of(json.loads(p.read_text())) is store.Kind.TUNE]
    record = store.read(path, store.Kind.TUNE)
    batches = [p["batch"] for p in record["points"]]
    # a search that ran only its first batch stopped for no reason: every point ran, and two at least
    assert batches in ([2, 4], [2, 4, 8]) and all(p["status"] == "ok" for p in record["points"])
    assert record["points"][0]["gain"] is None and all(p["gain"] is not None for p in record["points"][1:])
    # each point's rate and gain from its own result file, and where and why the doubling stopped, computed here
    # from those files (not by the knee function under test)
    rates = {}
    for p in out.glob("*.json"):
        result = json.loads(p.read_text())
        if store.kind_of(result) is store.Kind.RESULT:
            rates[result["config"]["batch_size"]] = result["summary"]["samples_per_sec_total"]
    assert sorted(rates) == batches and [p["rate"] for p in record["points"]] == [rates[b] for b in batches]
    gains = [rates[b] / rates[a] - 1 for a, b in zip(batches, batches[1:], strict=False)]
    got = [p["gain"] for p in record["points"]]
    assert got[0] is None and got[1:] == pytest.approx(gains)
    if gains[-1] < 0.02:  # the last doubling gained too little: the knee is the batch before it
        assert record["knee"] == batches[-2] and record["why"].startswith(f"doubling to {batches[-1]} gained")
    else:  # every doubling paid: it went on to --max-batch
        assert batches == [2, 4, 8] and record["knee"] == 8 and record["why"] == "reached --max-batch"
    assert record["options"] == "--device cpu --image-size 32 --steps-per-window 2 --warmup-steps 1 --windows 2"
    assert f"the knee is batch {record['knee']} per device" in (out / "tune.md").read_text()
    assert f"the knee is batch {record['knee']} per device" in r.stdout
    results = [p for p in out.glob("*.json") if store.kind_of(json.loads(p.read_text())) is store.Kind.RESULT]
    assert len(results) == len(batches)
    again = bench(*args, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 to run" in again.stderr  # every batch done with the same options: no run again
    assert len([p for p in out.glob("*.json") if store.kind_of(json.loads(p.read_text())) is store.Kind.RESULT]) \
        == len(batches)
