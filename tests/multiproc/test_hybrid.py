"""torch-hybrid (Parallax's hybrid on TorchRec): the table sharded row-wise, the rest under DDP. Its bytes per step
(computed and measured), bench allreduce --op alltoall, bench predict's all-to-all term, and what it refuses.
bench verify's PASS and the skipped exchange's FAIL are in tests/multiproc/test_sparse.py, beside the other modes'."""

import json

import pytest

from tests.conftest import bench, only_result


@pytest.mark.alone  # the bytes the host's interfaces sent: another test's ranks would add theirs
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


def test_allreduce_alltoall_through_torch_distributed(tmp_path):
    out = bench("allreduce", "--backend", "torch", "--op", "alltoall", "--np", "2", "--min-bytes", "4K",
                "--max-bytes", "64K", "--models", "", "--samples", "2", "--output", str(tmp_path))
    assert out.returncode == 0, out.stderr
    result = json.loads(next(tmp_path.glob("*alltoall*.json")).read_text())
    assert result["all_correct"] and result["config"]["op"] == "alltoall"
    assert all(r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] / 2) for r in result["rows"])


def test_verify_skips_it_for_a_model_without_a_token_embedding(tmp_path):
    out = bench("verify", "--framework", "torch", "--modes", "torch-hybrid", "--model", "vgg16",
                "--output", str(tmp_path))
    assert out.returncode == 0, out.stderr
    report = json.loads(next(tmp_path.glob("*verify*.json")).read_text())
    assert report["modes"][0]["status"] == "SKIP" and "token embedding" in report["modes"][0]["reason"]
