"""torch-hybrid (Parallax's hybrid on TorchRec): the table sharded row-wise, the rest under DDP. Its bytes per step
(computed and measured), bench allreduce --op alltoall, bench predict's all-to-all term, and what it refuses.
bench verify's PASS and the skipped exchange's FAIL are in tests/test_sparse.py, beside the other modes'."""

import dataclasses
import json

import pytest
from conftest import bench, only_result

from bench.config import RunConfig
from bench.errors import BenchError


def _resolved(np=2, vocab=1000, batch=8, seq=32):
    return RunConfig(mode="torch-hybrid", model="transformer-small", num_classes=vocab, batch_size=batch,
                     seq_len=seq, sparse_embeddings=True).resolve("cpu", np)


@pytest.mark.parametrize("np_", [2, 4])
def test_computed_bytes_follow_the_formula(np_):
    """(n-1) r (i + 8d) through the all-to-alls (ids out, rows back, row gradients out), and the dense part's
    ring allreduce 2 (n-1) D, which leaves the table out but keeps the untied output projection."""
    from bench.measure import traffic
    from bench.models import MODELS

    record = traffic.computed(_resolved(np_))
    spec = MODELS["transformer-small"]
    rows, d = 2 * 8 * 32, 64
    dense = 4 * (spec.parameters(1000, untied=True) - 1000 * d)
    assert record["exchange"] == "hybrid" and record["dense_bytes"] == dense
    assert record["alltoall_bytes_per_rank"] == rows * (8 + 8 * d) and record["sparse_bytes_per_rank"] == 0
    assert record["alltoall_bytes"] == (np_ - 1) * rows * (8 + 8 * d)
    assert record["bytes_per_step"] == record["alltoall_bytes"] + 2 * (np_ - 1) * dense


def test_predict_prices_the_all_to_all():
    from bench.commands.predict import Inputs, comm_time

    dense = Inputs(step_time_s=0.1, batch_size=8, gradient_bytes=10**9, busbw_GBps=1.0, latency_s=1e-3,
                   fusion_bytes=0)
    hybrid = dataclasses.replace(dense, alltoall_bytes=3 * 10**8, alltoall_busbw_GBps=0.5, alltoall_latency_s=2e-3)
    for n in (2, 4):  # three all-to-alls a step: 3 (n - 1) a" + (n - 1) / n R / B"
        assert comm_time(hybrid, n) - comm_time(dense, n) == pytest.approx(3 * (n - 1) * 2e-3 + (n - 1) / n * 0.6)
    assert comm_time(hybrid, 1) == 0


def test_the_alltoall_collective():
    import numpy as np

    from bench.commands.allreduce import AllreduceConfig
    from bench.commands.allreduce.collectives import ALLTOALL

    assert ALLTOALL.bus_factor(4) == pytest.approx(0.75)
    assert ALLTOALL.bandwidths(10**6, 0.01, 4) == pytest.approx((0.1, 0.075))
    assert ALLTOALL.elements(1001, 2) == 1000  # whole blocks
    good = np.repeat(np.arange(1, 4, dtype=np.float32), 4)  # block j from rank j: j + 1
    assert ALLTOALL.correct(good, 3, 12)
    assert not ALLTOALL.correct(np.full(12, 2.0, np.float32), 3, 12)  # every block the same: nothing moved
    assert not ALLTOALL.correct(good[::-1].copy(), 3, 12)
    with pytest.raises(BenchError, match="--backend tf has no alltoall"):
        AllreduceConfig(backend="tf", op="alltoall")


@pytest.mark.parametrize("args, message", [
    (["--model", "vgg16"], "torch-hybrid shards a token embedding over the ranks"),
    (["--model", "transformer-small", "--sparse-embeddings", "--sparse-as-dense"], "--sparse-as-dense"),
    (["--model", "transformer-small", "--precision", "amp-bf16"], "torch-hybrid runs fp32"),
])
@pytest.mark.framework
def test_what_it_refuses_is_one_line(args, message, tmp_path):
    from bench.launching.detect import LaunchInfo
    from bench.modes import torch_hybrid

    options = {"model": args[1]}
    if "--sparse-as-dense" in args:
        options.update(sparse_embeddings=True, sparse_as_dense=True)
    if "--precision" in args:
        options["precision"] = "amp-bf16"
    with pytest.raises(BenchError, match=message):
        torch_hybrid.preflight(RunConfig(mode="torch-hybrid", **options), LaunchInfo("none"))


@pytest.mark.multiproc
def test_measured_bytes_agree_with_the_computed(tmp_path):
    """Two ranks, 2 x 16 x 64 lookups each a step: the all-to-alls carry more than the dense allreduce, so a
    wrong term in either shows in the interface counters."""
    out = bench("torch-hybrid", "--model", "transformer-small", "--num-classes", "1000", "--batch-size", "16",
                "--seq-len", "64", "--np", "2", "--warmup-steps", "1", "--steps-per-window", "3", "--windows", "2",
                "--output", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "Warning" not in out.stderr and "is_fx_tracing" not in out.stderr  # TorchRec's set-up kept quiet
    result = only_result(tmp_path)
    computed, measured = result["traffic"]["computed"], result["traffic"]["measured"]
    assert computed["alltoall_bytes"] > computed["allreduce_bytes"] / 2
    assert 0.98 < measured["bytes_per_step"] / computed["bytes_per_step"] < 1.15
    assert result["sync"]["ranks_in_sync"] and result["sync"]["params_changed"]
    distribution = result["environment"]["distribution"]
    assert distribution["library"] == "torchrec" and distribution["table_sharding"] == "row_wise"
    assert result["config"]["sparse_embeddings"]  # the untied model, implied by the mode
    assert result["attribution"]["measured"] is False


@pytest.mark.multiproc
def test_allreduce_alltoall_through_torch_distributed(tmp_path):
    out = bench("allreduce", "--backend", "torch", "--op", "alltoall", "--np", "2", "--min-bytes", "4K",
                "--max-bytes", "64K", "--models", "", "--samples", "2", "--output", str(tmp_path))
    assert out.returncode == 0, out.stderr
    result = json.loads(next(tmp_path.glob("*alltoall*.json")).read_text())
    assert result["all_correct"] and result["config"]["op"] == "alltoall"
    assert all(r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] / 2) for r in result["rows"])


@pytest.mark.multiproc
def test_verify_skips_it_for_a_model_without_a_token_embedding(tmp_path):
    out = bench("verify", "--framework", "torch", "--modes", "torch-hybrid", "--model", "vgg16",
                "--output", str(tmp_path))
    assert out.returncode == 0, out.stderr
    report = json.loads(next(tmp_path.glob("*verify*.json")).read_text())
    assert report["modes"][0]["status"] == "SKIP" and "token embedding" in report["modes"][0]["reason"]


@pytest.mark.framework
def test_without_torchrec_it_is_one_line_naming_the_install(monkeypatch):
    import sys

    from bench.errors import MissingDependency
    from bench.launching.detect import LaunchInfo
    from bench.modes import torch_hybrid

    monkeypatch.setitem(sys.modules, "torchrec", None)
    with pytest.raises(MissingDependency, match="pip install -r requirements/hybrid.txt"):
        torch_hybrid.preflight(RunConfig(mode="torch-hybrid", model="transformer-small"), LaunchInfo("none"))
