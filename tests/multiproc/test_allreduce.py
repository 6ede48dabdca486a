"""bench allreduce: sizes, the nccl-tests formulas, bad input, and real 2-rank runs through every backend."""

import json
import socket
import sys

import pytest

from bench.commands.allreduce import gradient_bytes
from tests.conftest import bench, run

EACH_BACKEND = ["torch", pytest.param("horovod-torch", marks=pytest.mark.horovod),
                pytest.param("horovod-tf", marks=pytest.mark.horovod), "tf"]


def _result(out):
    files = sorted(out.glob("*-allreduce-*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


@pytest.mark.parametrize("backend", EACH_BACKEND)
def test_two_ranks_each_backend(backend, out):
    r = bench("allreduce", "--backend", backend, "--np", "2", "--min-bytes", "4K", "--max-bytes", "1M",
              "--models", "resnet50", "--samples", "3", "--target-sample-s", "0.05", "--output", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    result = _result(out)
    assert result["world_size"] == 2 and result["all_correct"]
    sizes = [row["bytes"] for row in result["rows"]]
    assert sizes == [4096, 16384, 65536, 262144, 1048576, gradient_bytes("resnet50")]
    for row in result["rows"]:
        assert row["correct"]
        assert len(row["samples_s_per_rank"]) == 2 and all(len(s) == 3 for s in row["samples_s_per_rank"])
        assert row["time_s"] > 0
        assert row["algbw_GBps"] == pytest.approx(row["bytes"] / row["time_s"] / 1e9)
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"])  # 2 (n - 1) / n = 1 at n = 2
    assert result["rows"][-1]["model"] == "resnet50"
    assert backend.split("-")[0] in result["environment"]["transport"] or backend == "tf"
    ranks = result["environment"]["ranks"]  # every rank's host and device, in rank order
    assert [x["rank"] for x in ranks] == [0, 1] and {x["host"] for x in ranks} == {socket.gethostname()}
    assert all(x["device"].startswith(("cpu", "/cpu", "/job")) for x in ranks), ranks
    assert "result:" in r.stdout and "busbw" in r.stdout


@pytest.mark.horovod
def test_horovod_under_mpirun_uses_the_mpi_controller(out):
    r = run(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", sys.executable, "-m", "bench",
             "allreduce", "--backend", "horovod-torch", "--max-bytes", "64K", "--models", "", "--samples", "2",
             "--target-sample-s", "0.05", "--output", str(out)])
    assert r.returncode == 0, r.stderr[-3000:]
    result = _result(out)
    assert result["launcher"] == "mpirun" and result["environment"]["transport"] == "horovod mpi"
    assert result["all_correct"] and [row["bytes"] for row in result["rows"]] == [4096, 16384, 65536]


@pytest.mark.parametrize("backend", EACH_BACKEND)
def test_allgather_two_ranks_each_backend(backend, out):
    r = bench("allreduce", "--backend", backend, "--op", "allgather", "--np", "2", "--min-bytes", "4K",
              "--max-bytes", "64K", "--models", "", "--samples", "2", "--target-sample-s", "0.02", "--output", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    files = sorted(out.glob("*-allgather-*.json"))
    assert len(files) == 1, files
    result = json.loads(files[0].read_text())
    assert result["config"]["op"] == "allgather" and result["all_correct"]
    assert [row["bytes"] for row in result["rows"]] == [4096, 16384, 65536]
    for row in result["rows"]:
        assert row["algbw_GBps"] == pytest.approx(2 * row["bytes"] / row["time_s"] / 1e9)  # n S / t
        assert row["busbw_GBps"] == pytest.approx(row["bytes"] / row["time_s"] / 1e9)  # (n - 1) S / t
