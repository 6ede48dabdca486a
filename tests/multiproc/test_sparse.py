"""Sparse embedding gradients (--sparse-embeddings, --sparse-as-dense), the bytes a step moves (bench.measure.traffic)
and bench predict's allgather term."""


import pytest

from tests.conftest import bench, only_result

SMALL = ["--model", "transformer-small", "--batch-size", "2", "--seq-len", "8", "--warmup-steps", "1",
         "--steps-per-window", "3", "--windows", "2"]


@pytest.mark.alone  # the bytes the host's interfaces sent: another test's ranks would add theirs
@pytest.mark.parametrize("mode, extra", [("torch-horovod", []), ("tf-native", ["--strategy", "ps"])])
def test_measured_bytes_agree_with_the_computed(mode, extra, tmp_path):
    out = bench(mode, *extra, *SMALL, "--num-classes", "5000", "--sparse-embeddings", "--np", "2",
                "--output", str(tmp_path))
    assert out.returncode == 0, out.stderr
    result = only_result(tmp_path)
    computed, measured = result["traffic"]["computed"], result["traffic"]["measured"]
    assert computed["sparse_bytes_per_rank"] > 0
    # headers, size exchanges and gRPC framing add a little; a wrong formula is off by 2x or more
    assert 0.98 < measured["bytes_per_step"] / computed["bytes_per_step"] < 1.15
    assert result["workload"]["parameters"] == result["workload"]["gradient_bytes"] // 4
    assert result["sync"]["ranks_in_sync"]


def test_verify_passes_with_sparse_gradients_and_catches_a_skipped_exchange(tmp_path):
    common = ["verify", "--model", "transformer-small", "--sparse-embeddings", "--output", str(tmp_path)]
    out = bench(*common, "--framework", "torch", timeout=400)
    assert out.returncode == 0, out.stdout + out.stderr
    import json

    report = json.loads(next(tmp_path.glob("*verify*.json")).read_text())
    modes = {m["mode"]: m for m in report["modes"]}
    assert {name: m["status"] for name, m in modes.items()} == {
        "torch-ddp": "PASS", "torch-horovod": "PASS", "torch-hybrid": "PASS"}
    # the hybrid: the gathered table and the dense part match one process (plain SGD, as its table trains)
    assert modes["torch-hybrid"]["initial_identical"] and modes["torch-hybrid"]["ranks_in_sync"]
    out = bench(*common, "--modes", "torch-horovod,torch-hybrid", "--fault", "skip-allreduce", "--output",
                str(tmp_path / "fault"))
    assert out.returncode == 1
    faulted = json.loads(next((tmp_path / "fault").glob("*verify*.json")).read_text())
    assert {m["mode"]: m["status"] for m in faulted["modes"]} == {"torch-horovod": "FAIL", "torch-hybrid": "FAIL"}
