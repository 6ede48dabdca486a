"""Real multi-process runs on CPU: every launcher path, ranks in sync, valid results."""

import sys

import pytest

from tests.conftest import SMALL, assert_valid_run, bench, only_result, run


def test_torch_ddp_self_spawned(out):
    # This CPU's GEMM peak in the ranks' thread share first (bench peak): the run's MFU is held against it.
    p = bench("peak", "--device", "cpu", "--np", "2", "--seconds", "0.05", "--repeats", "2", "--output", str(out))
    assert p.returncode == 0, p.stderr
    assert "peak:" in p.stdout and len(list((out / "peak").glob("*-cpu-*t-fp32-*.json"))) == 1
    r = bench("torch-ddp", *SMALL, "--np", "2", "--output", str(out), NCCL_DEBUG="WARN", GLOO_SOCKET_IFNAME="lo")
    assert r.returncode == 0, r.stderr
    result = only_result(out)
    util = result["utilisation"]
    assert util["measured_peak_tflops"] > 0 and util["measured_peak_source"].startswith(str(out / "peak"))
    assert util["mfu_measured"] == result["summary"]["model_tflops_per_gpu"] / util["measured_peak_tflops"]
    assert util["spec_peak_tflops"] is None and "MFU (measured peak)" in r.stdout
    assert_valid_run(result, "torch-ddp", 2, "self")
    assert result["environment"]["distribution"]["backend"] == "gloo"
    assert "throughput, total" in r.stdout and "result:" in r.stdout
    assert (out / "results.csv").read_text().count("\n") == 2
    settings = result["environment"]["settings"]
    assert settings["NCCL_DEBUG"] == "WARN" and settings["GLOO_SOCKET_IFNAME"] == "lo"
    assert settings["OMP_NUM_THREADS"] and "RANK" not in settings  # the spawner's share; no per-rank identity
    assert result["environment"]["packages"]["torch"].startswith("2.")
    assert result["environment"]["image"] is None
    # Not a terminal: rank 0 logs its start and each window in plain lines.
    assert "torch-ddp: ranks started, 2 replica(s)" in r.stderr
    assert r.stderr.count("img/s (rank 0's clock x world), running") == 2  # the workload's unit


def test_torch_ddp_under_torchrun(out):
    r = run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "bench", "torch-ddp",
             *SMALL, "--output", str(out)])
    assert r.returncode == 0, r.stderr
    assert_valid_run(only_result(out), "torch-ddp", 2, "torchrun")


def test_torch_ddp_duration_mode_and_fp16_compression(out):
    r = bench("torch-ddp", *SMALL, "--np", "2", "--duration", "1.5", "--fp16-allreduce", "--precision",
              "amp-bf16", "--output", str(out))
    assert r.returncode == 0, r.stderr
    result = only_result(out)
    windows = result["samples"]["window_s"]
    assert len(windows[0]) == len(windows[1]) >= 1
    assert max(sum(w) for w in windows) >= 1.5
    assert result["sync"]["ranks_in_sync"] and result["config"]["precision"] == "amp-bf16"


def test_torch_horovod_self_spawned_gloo(out):
    # Horovod's knobs: one set by its option, one by its variable, one left at Horovod's default; all recorded
    r = bench("torch-horovod", *SMALL, "--np", "2", "--output", str(out), "--fusion-threshold", "1M",
              HOROVOD_CYCLE_TIME="2.5")
    assert r.returncode == 0, r.stderr
    result = only_result(out)
    assert_valid_run(result, "torch-horovod", 2, "self")
    distribution = result["environment"]["distribution"]
    assert distribution["controller"] == "gloo" and result["config"]["fusion_threshold"] == 1048576
    assert (distribution["fusion_threshold"], distribution["cycle_time"], distribution["nccl_streams"]) == \
        (1048576, 2.5, 1)
    assert distribution["knobs_set"] == ["cycle_time", "fusion_threshold"]
    assert result["environment"]["horovod"]["version"] == "0.28.1"


def test_torch_horovod_under_horovodrun_gloo(out):
    r = run(["horovodrun", "-np", "2", "--gloo", sys.executable, "-m", "bench", "torch-horovod", *SMALL,
             "--output", str(out)])
    assert r.returncode == 0, r.stderr
    assert_valid_run(only_result(out), "torch-horovod", 2, "horovodrun")


def test_torch_horovod_under_mpirun(out):
    r = run(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", sys.executable, "-m", "bench",
             "torch-horovod", *SMALL, "--fp16-allreduce", "--output", str(out)])
    assert r.returncode == 0, r.stderr
    result = only_result(out)
    assert_valid_run(result, "torch-horovod", 2, "mpirun")
    assert result["environment"]["distribution"]["controller"] == "mpi"


@pytest.mark.parametrize("mode", ["torch-ddp", "torch-horovod"])
def test_the_tuned_profile_compiles_and_says_so(mode, out):
    """--tuned in real ranks: DDP compiled whole (its optimizer splits the graph at the buckets), Horovod's
    DistributedOptimizer over a model compiled in place; the compile time is reported apart and no graph is
    compiled inside the timed windows; the attribution's compute-only step is compiled before it is timed."""
    r = bench(mode, "--model", "resnet20", "--tuned", "--np", "2", "--output", str(out), timeout=600)
    assert r.returncode == 0, r.stderr
    result = only_result(out)
    assert_valid_run(result, mode, 2, "self")
    c, timing = result["config"], result["timing"]
    assert (c["profile"], c["compile"], c["channels_last"], c["fused_optimizer"]) == ("cpu-tuned", "default", True,
                                                                                      True)
    # every rank's first step compiled, the untimed steps after it, the timed windows and the timed attribution
    # steps did not: the compiler's own counts, not times (a busy machine slows a warmup step as much as it likes)
    assert timing["graphs_compiled_in_first_step"] >= 1
    assert timing["graphs_compiled_in_warmup"] == timing["graphs_compiled_in_windows"] == 0
    assert 1.0 < timing["compile_s"] < timing["first_step_s"] <= timing["init_s"]
    assert [p["graphs_compiled"] for p in result["attribution"]["per_rank"]] == [0, 0]


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["torch-ddp", "torch-horovod"])
def test_gpu_run(mode, out):
    r = bench(mode, "--device", "cuda", "--np", "1", "--model", "resnet50", "--batch-size", "32",
              "--warmup-steps", "2", "--steps-per-window", "5", "--windows", "3", "--output", str(out))
    assert r.returncode == 0, r.stderr
    result = only_result(out)
    assert_valid_run(result, mode, 1, "self")
    assert result["environment"]["torch"]["gpus"]
