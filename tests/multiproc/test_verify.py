"""bench verify: the arithmetic, the weight mapping, bad input, and real runs that PASS and that FAIL."""

import json

import pytest

from tests.conftest import bench


def test_refuses_to_run_under_a_launcher(tmp_path):
    r = bench("verify", "--output", str(tmp_path), SLURM_STEP_ID="0", SLURM_PROCID="0", SLURM_NTASKS="1",
              SLURM_LOCALID="0")
    assert r.returncode == 1 and "without a launcher" in r.stderr


def _report(out):
    files = sorted(out.glob("*-verify-*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


@pytest.mark.horovod
def test_every_mode_passes_and_the_frameworks_agree(out):
    """Every mode's processes against one process on the global batch, on the smallest model verify takes
    (the modes' exchange is the same whatever the model; VGG-16's 553 MB snapshots made this 3 minutes
    longer). VGG-16 itself: the cross-framework check below, in process, and verify across the cluster's
    nodes (tests/system/test_cluster.py)."""
    r = bench("verify", "--framework", "both", "--model", "transformer-small", "--output", str(out), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    report = _report(out)
    modes = {m["mode"]: m for m in report["modes"]}
    assert set(modes) == {"torch-ddp", "torch-horovod", "torch-hybrid", "tf-horovod", "tf-native:multiworker",
                          "tf-native:mirrored", "tf-native:ps"}
    for name, m in modes.items():
        assert m["status"] == "PASS", (name, m)
        assert m["initial_identical"] and m["ranks_in_sync"] and m["params_changed"]
        assert m["of_update"] <= report["config"]["tolerance"]
    assert modes["torch-ddp"]["world_size"] == 2 and modes["tf-horovod"]["world_size"] == 2
    cross = report["cross_framework"]
    assert cross["status"] == "PASS" and len(cross["loss_torch"]) == len(cross["loss_tf"]) == 3
    assert cross["loss_torch"][0] != cross["loss_torch"][-1]  # training moved
    assert not list(out.glob(".*-params"))  # snapshots removed


@pytest.mark.horovod
def test_skipping_the_allreduce_fails(out):
    """The fault switch of each mode that has one of its own, on the smallest model that verify takes (the
    switch skips the exchange whatever the model; VGG-16's run above is the correct one)."""
    r = bench("verify", "--framework", "both", "--modes", "torch-ddp,tf-native:multiworker,tf-horovod",
              "--model", "transformer-small", "--fault", "skip-allreduce", "--no-cross", "--output", str(out),
              timeout=900)
    assert r.returncode == 1, r.stdout[-2000:]
    assert "verify FAILED for torch-ddp, tf-horovod, tf-native:multiworker" in r.stderr
    report = _report(out)
    assert not report["passed"] and report["cross_framework"] is None
    for m in report["modes"]:
        assert m["status"] == "FAIL"
        assert m["of_update"] > 0.05  # off by the order of the update, not by rounding
        assert not m["ranks_in_sync"]
