"""--trace in real runs (bench.measure.trace): each rank's profile of the traced steps beside the result, Horovod's
timeline, and the headline untouched; one PyTorch and one TensorFlow mode, both through Horovod."""

import json
from pathlib import Path

import pytest

from tests.conftest import SMALL, TF_SMALL, assert_valid_run, bench, only_result

TRACED = 2
RUNS = {"torch-horovod": SMALL, "tf-horovod": TF_SMALL}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    done = {}
    for mode, args in RUNS.items():
        out = tmp_path_factory.mktemp(mode)
        # a stall bound: ranks gathering objects of different types under Horovod once hung here for good
        r = bench(mode, *args, "--np", "2", "--trace", str(TRACED), "--stall-timeout", "90", "--output", str(out),
                  COLUMNS="250")  # the table unwrapped
        assert r.returncode == 0, r.stderr[-3000:]
        done[mode] = (out, only_result(out), r.stdout)
    return done


@pytest.mark.parametrize("mode", RUNS)
def test_each_rank_writes_its_profile_beside_the_result(runs, mode):
    out, result, stdout = runs[mode]
    assert_valid_run(result, mode, 2, "self")
    section = result["trace"]
    assert section["steps"] == TRACED and section["folder"] == f"{result['run_id']}.trace"
    assert [r["rank"] for r in section["per_rank"]] == [0, 1]
    for rank in section["per_rank"]:
        assert rank["files"] and all((out / f).is_file() and (out / f).stat().st_size > 0 for f in rank["files"])
        assert all(Path(f).parts[0] == section["folder"] for f in rank["files"])
        assert rank["cost"] == pytest.approx(rank["traced_step_s"] / rank["untraced_step_s"] - 1)
    assert section["cost"] == pytest.approx(section["traced_step_s"] / section["untraced_step_s"] - 1)
    # the traced steps are outside the headline: the windows are the run's own
    assert all(len(w) == result["config"]["windows"] for w in result["samples"]["window_s"])
    assert "tracing cost" in stdout and section["folder"] in stdout


def test_the_torch_profile_holds_the_traced_steps_and_their_parts(runs):
    out, result, _ = runs["torch-horovod"]
    for rank in result["trace"]["per_rank"]:
        (name,) = rank["files"]
        assert name.endswith(f"rank{rank['rank']}.pt.trace.json")
        events = json.loads((out / name).read_text())["traceEvents"]
        names = [e.get("name") for e in events]
        assert names.count("hvdbench.step") == TRACED
        # the parts of the traced steps and of the untimed one before them
        for part in ("data", "forward", "backward", "optimizer"):
            assert names.count(f"hvdbench.{part}") == TRACED + 1, part


def test_the_tensorflow_profile_is_one_xspace_per_rank(runs):
    out, result, _ = runs["tf-horovod"]
    for rank in result["trace"]["per_rank"]:
        (name,) = rank["files"]
        assert name.startswith(f"{result['trace']['folder']}/rank{rank['rank']}/plugins/profile/")
        assert name.endswith(".xplane.pb")


@pytest.mark.parametrize("mode", RUNS)
def test_horovod_writes_its_timeline_of_the_traced_steps(runs, mode):
    out, result, _ = runs[mode]
    timeline = result["trace"]["horovod_timeline"]
    assert timeline == f"{result['trace']['folder']}/horovod-timeline.json"
    events = json.loads((out / timeline).read_text())
    assert any(e.get("ph") == "B" for e in events)  # operations recorded, not only the file's header
    assert [r["timeline"] for r in result["trace"]["per_rank"]] == [timeline, None]
