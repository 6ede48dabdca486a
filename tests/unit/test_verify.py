"""bench verify: the arithmetic, the weight mapping, bad input, and real runs that PASS and that FAIL."""


import numpy as np
import pytest

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
    status = {row.mode: (row.status, row.reason) for row in rows}
    assert status["torch-horovod"] == ("SKIP", "no such library here")
    assert status["torch-ddp"] == ("FAIL", "the run failed: rank 1 died")
