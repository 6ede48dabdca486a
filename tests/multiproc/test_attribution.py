"""Per-rank attribution (bench.measure.attribution) in real runs with a straggler made on purpose (the slow-rank
hook), in each mode that can time its compute and its exchange apart (the arithmetic: tests/unit/)."""

import json

import pytest

from bench.measure import attribution
from tests.conftest import SMALL, TF_SMALL, assert_valid_run, bench, only_result

# The ranks timed against each other: another test's ranks beside them would slow some of their steps.
pytestmark = pytest.mark.alone

# -- real runs -------------------------------------------------------------------------------------------
# (mode, ranks, slow rank or None, model args); the slow rank's compute runs FACTOR times as long. Six attribution
# steps of each kind: the steps of these small models last 5-40 ms on two shared cores, and with three a loaded
# machine disturbed every step of a rank (a gate run measured x1.96 for x3).
FACTOR = 3
ATTRIBUTION_STEPS = "6"
RUNS = {
    "torch-ddp np2": ("torch-ddp", 2, None, SMALL),
    "torch-ddp np2 slow 1": ("torch-ddp", 2, 1, SMALL),
    "torch-ddp np3 slow 2": ("torch-ddp", 3, 2, SMALL),
    "torch-horovod np2 slow 1": ("torch-horovod", 2, 1, SMALL),
    "tf-horovod np2 slow 0": ("tf-horovod", 2, 0, TF_SMALL),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    done = {}
    for name, (mode, np, slow, args) in RUNS.items():
        out = tmp_path_factory.mktemp(name.replace(" ", "-"))
        hooks = {} if slow is None else {"HVDBENCH_HOOKS": json.dumps({"slow_rank": slow, "slow_factor": FACTOR})}
        r = bench(mode, *args, "--np", str(np), "--attribution-steps", ATTRIBUTION_STEPS, "--output", str(out), **hooks)
        assert r.returncode == 0, r.stderr[-3000:]
        done[name] = (only_result(out), r.stdout)
    return done


@pytest.mark.horovod
@pytest.mark.parametrize("name", [n for n in RUNS if RUNS[n][2] is not None])
def test_the_slowed_rank_is_named_and_the_others_wait(runs, name):
    mode, np, slow, _ = RUNS[name]
    result, stdout = runs[name]
    assert_valid_run(result, mode, np, "self")
    section = result["attribution"]
    assert section["measured"], section
    by_rank = {p["rank"]: p for p in section["per_rank"]}
    print(name, json.dumps({r: {k: round(p[k], 4) for k in ("compute_s", "exchange_s", "step_s", "exposed_s")}
                            for r, p in by_rank.items()}), section["straggler"])
    straggler = section["straggler"]
    assert straggler is not None and straggler["rank"] == slow, section
    # about FACTOR; a third of the extra at least (the others' fastest step may still be one slowed by the
    # neighbour's threads), and well past the threshold that names a straggler
    assert straggler["slowdown"] > 1 + (FACTOR - 1) / 3 > 1 + attribution.STRAGGLER_THRESHOLD, straggler
    others = [p for r, p in by_rank.items() if r != slow]
    for p in others:
        # their extra time is waiting: exposed, not compute
        assert p["compute_s"] < by_rank[slow]["compute_s"] / 1.5, (p, by_rank[slow])
        assert p["exposed_s"] - by_rank[slow]["exposed_s"] > (by_rank[slow]["compute_s"] - p["compute_s"]) / 2, p
    assert f"rank {slow}" in stdout and "straggler" in stdout


def test_without_a_fault_no_rank_is_named(runs):
    result, stdout = runs["torch-ddp np2"]
    assert_valid_run(result, "torch-ddp", 2, "self")
    section = result["attribution"]
    print(json.dumps(section["per_rank"]))
    assert section["straggler"] is None, section
    assert "straggler" in stdout and "none" in stdout
