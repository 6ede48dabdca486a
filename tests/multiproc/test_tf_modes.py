"""TensorFlow modes on CPU, real processes: Horovod (Gloo, MPI) and tf.distribute (multiworker, mirrored, ps)."""

import json
import sys

import pytest

from tests.conftest import TF_SMALL, assert_valid_run, bench, only_result, run


def test_tf_horovod_gloo_and_tf_native_multiworker_average_the_same_gradients(tmp_path):
    hvd_out, mw_out = tmp_path / "hvd", tmp_path / "mw"
    r = bench("tf-horovod", *TF_SMALL, "--np", "2", "--output", str(hvd_out))
    assert r.returncode == 0, r.stderr
    hvd = only_result(hvd_out)
    assert_valid_run(hvd, "tf-horovod", 2, "self")
    # TensorFlow's start-up lines (parent and ranks) stay quiet: bench's own lines are what the user sees
    assert "absl::InitializeLog" not in r.stderr and "oneDNN custom operations" not in r.stderr, r.stderr[:2000]
    assert hvd["environment"]["distribution"]["controller"] == "gloo"
    # The spawner's per-rank core share is for PyTorch; TF ranks keep TF's own pool (bench.distributed.tfdist).
    assert all("TensorFlow's default" in r["device"] for r in hvd["environment"]["ranks"])
    assert hvd["timing"]["first_step_s"] > 0 and hvd["summary"]["samples_per_sec_wall_total"] > 0

    r = bench("tf-native", *TF_SMALL, "--np", "2", "--output", str(mw_out))
    assert r.returncode == 0, r.stderr
    mw = only_result(mw_out)
    assert_valid_run(mw, "tf-native", 2, "self")
    assert mw["config"]["strategy"] == "multiworker"
    assert mw["environment"]["distribution"]["collectives"] == "RING"
    # Same initial weights, same per-rank data, gradients averaged over the two ranks in both: the
    # final weights agree up to reduction order. A mode that skipped averaging would land elsewhere.
    assert mw["sync"]["param_sum_final"][0] == pytest.approx(hvd["sync"]["param_sum_final"][0], rel=1e-5)


def test_xla_compiles_each_ranks_pass_and_both_exchanges_average_the_same_gradients(tmp_path):
    """--xla (what --tuned sets on a GPU): XLA compiles each rank's forward and backward pass; Horovod's allreduce
    runs after the compiled pass (outside it) and tf.distribute's inside apply_gradients. Both average the same
    gradients from the same weights (a rank that skipped the exchange would leave the ranks apart: ranks_in_sync);
    the compile time is reported apart and nothing compiles inside the timed windows."""
    small = ["--model", "resnet20", "--image-size", "32", "--batch-size", "4", "--num-classes", "10",
             "--warmup-steps", "2", "--steps-per-window", "2", "--windows", "2", "--xla", "--np", "2"]
    results = {}
    for mode in ("tf-horovod", "tf-native"):
        r = bench(mode, *small, "--output", str(tmp_path / mode))
        assert r.returncode == 0, r.stderr
        result = results[mode] = only_result(tmp_path / mode)
        assert_valid_run(result, mode, 2, "self")
        timing = result["timing"]
        assert result["config"]["xla"] is True
        assert timing["graphs_compiled_in_first_step"] >= 1
        assert timing["graphs_compiled_in_warmup"] == timing["graphs_compiled_in_windows"] == 0
        assert 0.5 < timing["compile_s"] < timing["first_step_s"] <= timing["init_s"]
    hvd = results["tf-horovod"]
    # its compute-only step compiled before it was timed (the compiler's count, not a time)
    assert [p["graphs_compiled"] for p in hvd["attribution"]["per_rank"]] == [0, 0]
    assert results["tf-native"]["sync"]["param_sum_final"][0] == pytest.approx(hvd["sync"]["param_sum_final"][0],
                                                                                rel=1e-4)


def test_tf_horovod_under_mpirun(out):
    r = run(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", sys.executable, "-m", "bench",
             "tf-horovod", *TF_SMALL, "--fp16-allreduce", "--output", str(out)])
    assert r.returncode == 0, r.stderr
    result = only_result(out)
    assert_valid_run(result, "tf-horovod", 2, "mpirun")
    assert result["environment"]["distribution"]["controller"] == "mpi"


def test_tf_native_mirrored_one_process(out):
    r = bench("tf-native", "--strategy", "mirrored", *TF_SMALL, "--output", str(out))
    assert r.returncode == 0, r.stderr
    result = only_result(out)
    assert_valid_run(result, "tf-native", 1, "self")
    assert result["environment"]["distribution"]["strategy"] == "MirroredStrategy"


def test_tf_native_parameter_servers(out):
    r = bench("tf-native", "--strategy", "ps", "--num-ps", "1", "--np", "2", *TF_SMALL, "--output", str(out),
              timeout=300)
    assert r.returncode == 0, r.stderr
    result = only_result(out)
    assert result["status"] == "ok" and result["world_size"] == 2 and result["processes"] == 1
    (report,) = result["sync"]["reports"]
    assert report["variables_on_ps"] and all("/job:ps" in d for d in report["variable_devices"])
    steps = 1 + 1 + 2 * 2  # first + warmup + windows x steps, each one closure per worker
    assert report["closures_run"] == 2 * steps
    assert len(report["updates_per_worker"]) == 2 and all(c > 0 for c in report["updates_per_worker"])
    assert sum(report["updates_per_worker"]) == report["closures_run"] == report["optimizer_iterations"]
    assert result["sync"]["ranks_in_sync"] and result["sync"]["params_changed"]
    tasks = result["environment"]["distribution"]["tasks"]
    assert [(t["job"], t["index"]) for t in tasks] == [("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1)]
    assert all(t["host"] == "127.0.0.1" and t["devices"] == ["CPU:0"] for t in tasks), tasks


def test_a_server_serves_until_the_chief_has_come_and_gone():
    """Under srun nobody stops a worker or ps: it ends once the chief's port has closed, or fails if it never opened."""
    import socket
    import threading
    import time

    from bench.errors import BenchError
    from bench.modes.tf_native import serve_while_chief

    chief = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{chief.getsockname()[1]}"
    threading.Timer(1.0, chief.close).start()
    started = time.monotonic()
    serve_while_chief(None, address, timeout_s=30, poll_s=0.2)
    # it returned (a server that missed the chief's going would serve to the test's timeout: the deadlock guard),
    # and only once the chief had gone
    assert time.monotonic() - started >= 1.0
    with pytest.raises(BenchError, match=f"the chief at {address} did not start within 0.5 s"):
        serve_while_chief(None, address, timeout_s=0.5, poll_s=0.1)


def test_tf_native_user_tf_config_malformed(out):
    r = bench("tf-native", *TF_SMALL, "--output", str(out), TF_CONFIG="{not json")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith("error: malformed TF_CONFIG: not JSON")
    r = bench("tf-native", *TF_SMALL, "--output", str(out),
              TF_CONFIG=json.dumps({"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": 3}}))
    assert r.returncode == 1 and "is not in the cluster" in r.stderr
    assert "Traceback" not in r.stderr and (not out.exists() or not list(out.glob("*.json")))


@pytest.mark.parametrize("args, message", [
    (["tf-native", "--strategy", "allreduce"], "allreduce"),
    (["tf-native", "--strategy", "ps", "--num-ps", "0"], "--num-ps must be an integer >= 1"),
    (["tf-native", "--num-ps", "2"], "--num-ps applies to --strategy ps only"),
    (["tf-native", "--fp16-allreduce"], "no gradient compression"),
    (["tf-native", "--strategy", "mirrored", "--np", "2", "--device", "cpu"], "--np 2 > 1"),
])
def test_tf_native_bad_input(args, message, out):
    r = bench(*args, "--output", str(out))
    assert r.returncode != 0
    assert message in r.stderr.strip().splitlines()[-1]
    assert "Traceback" not in r.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [["tf-horovod"], ["tf-native"], ["tf-native", "--strategy", "mirrored"]])
def test_tf_gpu_run(mode, out):
    r = bench(*mode, "--device", "cuda", "--np", "1", "--model", "resnet50", "--batch-size", "32",
              "--warmup-steps", "2", "--steps-per-window", "5", "--windows", "3", "--output", str(out))
    assert r.returncode == 0, r.stderr
    result = only_result(out)
    assert_valid_run(result, mode[0], 1, "self")
    assert result["environment"]["tensorflow"]["gpus"]
