"""bench tune end to end on the CPU: doubling batches as sweep cells, the knee, the record; a rerun resumes."""

import json

from bench.commands.tune import knee
from bench.records import store
from bench.records.kinds import Tune
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
    assert batches == [2, 4, 8][:len(batches)] and all(p["status"] == "ok" for p in record["points"])
    assert record["points"][0]["gain"] is None and all(p["gain"] is not None for p in record["points"][1:])
    assert (record["knee"], record["why"]) == knee(store.load(path, Tune).points, 0.02)
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
