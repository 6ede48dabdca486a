"""bench verify: the arithmetic, the weight mapping, bad input, and real runs that PASS and that FAIL."""

import json

import numpy as np
import pytest
from conftest import bench

from bench.commands.verify import VerifyConfig, differences, identical
from bench.commands.verify_cross import torch_to_tf
from bench.errors import BenchError


def test_differences_on_known_arrays():
    w0 = [np.zeros(3, np.float32), np.zeros((2, 2), np.float32)]
    ref = [np.array([1.0, -2.0, 4.0], np.float32), np.full((2, 2), 0.5, np.float32)]
    cand = [np.array([1.0, -2.0, 4.004], np.float32), np.array([[0.5, 0.5], [0.5, 0.49]], np.float32)]
    d = differences(w0, ref, cand)
    assert d["max_update"] == pytest.approx(4.0)
    assert d["max_abs"] == pytest.approx(0.01, rel=1e-4)  # the 0.49 element
    assert d["of_update"] == pytest.approx(0.01 / 4.0, rel=1e-4)
    assert d["max_rel"] == pytest.approx(0.01 / 0.5, rel=1e-4)  # tensor-relative, the 2x2 tensor
    assert differences(w0, ref, ref)["max_abs"] == 0.0


def test_differences_refuses_other_shapes():
    a = [np.zeros(3, np.float32)]
    with pytest.raises(BenchError, match="shapes"):
        differences(a, a, [np.zeros(4, np.float32)])


def test_identical_is_exact():
    a = [np.arange(4, dtype=np.float32)]
    assert identical(a, [a[0].copy()])
    b = a[0].copy()
    b[2] = np.nextafter(b[2], np.float32(10))
    assert not identical(a, [b])


def test_torch_to_tf_layouts_compute_the_same_function():
    """conv OIHW -> HWIO, and the first dense after the conv stack sees (H, W, C)-flattened features."""
    rng = np.random.default_rng(0)
    conv = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)  # out 3, in 2
    bias = rng.standard_normal(3).astype(np.float32)
    dense = rng.standard_normal((5, 3 * 2 * 2)).astype(np.float32)  # after a 3-channel 2x2 map
    last = rng.standard_normal((4, 5)).astype(np.float32)
    mapped = torch_to_tf([conv, bias, dense, np.zeros(5, np.float32), last])
    assert mapped[0].shape == (3, 3, 2, 3)
    assert np.array_equal(mapped[0][1, 2, 0, :], conv[:, 0, 1, 2])
    fmap = rng.standard_normal((3, 2, 2)).astype(np.float32)  # (C, H, W)
    torch_out = dense @ fmap.reshape(-1)
    tf_out = fmap.transpose(1, 2, 0).reshape(-1) @ mapped[2]
    assert np.allclose(torch_out, tf_out, rtol=1e-5)
    assert np.array_equal(mapped[4], last.T)  # later dense layers: a plain transpose


@pytest.mark.parametrize("kwargs,message", [
    ({"model": "resnet50"}, "batch normalisation"),
    ({"steps": 1}, "--steps must be >= 2"),
    ({"np": 1}, "--np must be >= 2"),
    ({"modes": ("torch-magic",)}, "cannot check mode"),
    ({"fault": "drop-tables"}, "unknown fault"),
    ({"framework": "jax"}, "--framework"),
    ({"tolerance": 0.0}, "--tolerance"),
])
def test_config_rejects_bad_input(kwargs, message):
    with pytest.raises(BenchError, match=message):
        VerifyConfig(**kwargs)


def test_cli_bad_input_is_one_line(cli, tmp_path):
    r = cli("verify", "--model", "resnet50", "--output", str(tmp_path))
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and "batch normalisation" in r.stderr
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.multiproc
def test_refuses_to_run_under_a_launcher(tmp_path):
    r = bench("verify", "--output", str(tmp_path), SLURM_STEP_ID="0", SLURM_PROCID="0", SLURM_NTASKS="1",
              SLURM_LOCALID="0")
    assert r.returncode == 1 and "without a launcher" in r.stderr


def _report(out):
    files = sorted(out.glob("*-verify-*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


@pytest.mark.multiproc
@pytest.mark.horovod
def test_every_mode_passes_and_the_frameworks_agree(out):
    """Every mode's processes against one process on the global batch, on the smallest model verify takes
    (the modes' exchange is the same whatever the model; VGG-16's 553 MB snapshots made this 3 minutes
    longer). VGG-16 itself: the cross-framework check below, in process, and verify across the cluster's
    nodes (tests/test_cluster.py)."""
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


@pytest.mark.framework
def test_pytorch_and_tensorflow_train_vgg16_alike():
    """bench verify's cross-framework check on the default model, VGG-16: both twins from the same weights on the
    same global batch, the loss trajectories within tolerance, and training moved."""
    from bench.commands.verify_cross import cross_framework

    cross = cross_framework(VerifyConfig(model="vgg16", framework="both"))
    assert cross["status"] == "PASS", cross
    assert len(cross["loss_torch"]) == len(cross["loss_tf"]) == 3 and cross["loss_torch"][0] != cross["loss_torch"][-1]
    assert cross["max_rel_loss"] <= cross["tolerance"]


@pytest.mark.multiproc
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


def test_a_missing_horovod_is_a_skip_by_its_type_not_its_words(monkeypatch, tmp_path):
    """verify tells SKIP from FAIL by the exception's type (MissingDependency), whatever its message says."""
    from bench.commands import verify
    from bench.errors import MissingDependency

    def missing(framework, mode):
        raise MissingDependency("no such library here")

    def failing(*args):
        raise BenchError("rank 1 died")

    monkeypatch.setattr(verify.hvdist, "import_hvd", missing)
    monkeypatch.setattr(verify, "_run_mode", failing)
    rows = verify.verify_framework(VerifyConfig(framework="torch"), "torch", tmp_path, lambda text: None)
    status = {row["mode"]: (row["status"], row["reason"]) for row in rows}
    assert status["torch-horovod"] == ("SKIP", "no such library here")
    assert status["torch-ddp"] == ("FAIL", "the run failed: rank 1 died")
