import time

import pytest

from bench.config import RunConfig
from bench.launching.detect import LaunchInfo
from bench.measure import nvml as nvml_module
from bench.measure import telemetry
from bench.measure.nvml import load_nvml
from bench.measure.telemetry import GpuTelemetry, TelemetryNode
from tests.conftest import bench, has_cuda, only_result
from tests.fake_nvml import FakeGPU, FakeNVML


def run_sampler(nvml, gpus, seconds=0.6, interval=0.05):
    s = telemetry.Sampler(nvml, [nvml.nvmlDeviceGetHandleByIndex(i) for i in gpus], gpus, interval, "h")
    s.start()
    time.sleep(0.1)
    s.mark("start")
    time.sleep(seconds)
    s.mark("end")
    time.sleep(0.1)
    s.stop()
    return s


def test_energy_from_counter_matches_power_times_time():
    nvml = FakeNVML([FakeGPU(power_w=300.0), FakeGPU(power_w=100.0)])
    s = run_sampler(nvml, [0, 1])
    summary = s.summary()
    elapsed = summary.timed_end - summary.timed_start
    g0, g1 = summary.gpus
    assert g0.energy_source == "counter"
    assert g0.energy_j == pytest.approx(300 * elapsed, rel=0.02)
    assert g1.energy_j == pytest.approx(100 * elapsed, rel=0.02)
    assert g0.power_w_mean == 300 and summary.power_source == "instant"
    assert g0.util_gpu_pct_mean == 97 and g0.mem_used_mib_peak == 10 * 1024
    assert not g0.throttled and summary.unavailable["nvlink_tx_kbs"] == "NotSupported"


def test_no_energy_counter_integrates_power_and_labels_it():
    nvml = FakeNVML([FakeGPU(power_w=200.0, energy=False, instant_power=False)])
    s = run_sampler(nvml, [0], seconds=1.0, interval=0.05)
    g = s.summary().gpus[0]
    assert g.energy_source == "integrated power samples"
    samples = [x for x in s.samples if s.marks["start"].t <= x.t <= s.marks["end"].t]
    span = samples[-1].t - samples[0].t
    assert g.energy_j == pytest.approx(200 * span, rel=1e-6)
    assert s.summary().power_source == "average"
    assert s.unavailable["energy_mj"] == "NotSupported"
    assert all(x.energy_mj is None for x in s.samples)  # absent, never 0


def test_unsupported_power_is_null_with_reason_not_zero():
    nvml = FakeNVML([FakeGPU(power_w=None, energy=False)])
    s = run_sampler(nvml, [0], seconds=0.2)
    g = s.summary().gpus[0]
    assert g.power_w_mean is None and g.energy_j is None
    assert g.energy_source.startswith("unavailable")
    assert s.unavailable["power_w"] == "NotSupported"
    assert all(x.power_w is None for x in s.samples)


def test_throttle_reasons_named_and_flagged():
    nvml = FakeNVML([FakeGPU(throttle=0x4 | 0x1)])
    g = run_sampler(nvml, [0], seconds=0.2).summary().gpus[0]
    assert g.throttle_reasons == ["gpu_idle", "sw_power_cap"] and g.throttled


def test_window_alignment_excludes_samples_outside_timed_windows():
    marks = {"start": telemetry.Mark(t=10.0, energy_mj={0: None}), "end": telemetry.Mark(t=20.0, energy_mj={0: None})}
    samples = [telemetry.GpuSample(t=t, host="h", gpu=0, power_w=p, util_gpu_pct=50, util_mem_pct=None,
                                   mem_used_mib=mib, sm_clock_mhz=None, mem_clock_mhz=None, temperature_c=None,
                                   throttle_reasons=0, pcie_tx_kbs=None, pcie_rx_kbs=None, nvlink_tx_kbs=None,
                                   nvlink_rx_kbs=None, energy_mj=None)
               for t, p, mib in ((5.0, 1000.0, 9.0), (10.0, 100.0, 1.0), (15.0, 100.0, 1.0), (20.0, 300.0, 2.0),
                                 (25.0, 1000.0, 1.0))]
    g = telemetry.summarize_node(samples, marks, {}, "average", "h", 5.0).gpus[0]
    assert g.samples_in_windows == 3
    assert g.mem_used_mib_peak == 9.0  # the peak of the whole run: memory held before the windows counts
    assert g.energy_j == pytest.approx(5 * 100 + 5 * 200)  # trapezoids over 10..20 only
    assert g.power_w_mean == pytest.approx(500 / 3)


def test_combine_energy_per_image_and_per_watt():
    nodes = [TelemetryNode(gpus=[GpuTelemetry(energy_j=600.0, power_w_mean=300.0, throttled=False)]),
             TelemetryNode(gpus=[GpuTelemetry(energy_j=400.0, power_w_mean=200.0, throttled=True)])]
    c = telemetry.combine(nodes, samples=2000, samples_per_sec_total=1000.0)
    assert c.energy_j == 1000.0 and c.energy_per_sample_j == 0.5
    assert c.samples_per_sec_per_watt == pytest.approx(2.0) and c.throttled
    nodes[1].gpus[0].energy_j = None
    assert telemetry.combine(nodes, 2000, 1000.0).energy_per_sample_j is None


def test_sampler_rejects_bad_interval():
    with pytest.raises(ValueError):
        telemetry.Sampler(FakeNVML([FakeGPU()]), [], [], 0)


@pytest.mark.skipif(has_cuda(), reason="a driver is present: NVML initialises")
def test_real_nvml_without_a_driver_is_reported_not_raised():
    nvml, reason = load_nvml()
    assert nvml is None and reason.startswith(("NVML did not initialise", "nvidia-ml-py"))


def test_bad_interval_from_cli(cli, out):
    r = cli("torch-ddp", "--telemetry-interval", "0", "--output", str(out))
    assert r.returncode == 1 and "--telemetry-interval must be > 0" in r.stderr


def test_small_shm_warning(monkeypatch, capsys):
    from bench import run
    from bench.records import env

    cfg = RunConfig(mode="torch-ddp").resolve("cuda", 2)
    monkeypatch.setattr(env, "shm_gib", lambda: 64 / 1024)
    run.warn_small_shm(cfg)
    err = capsys.readouterr().err
    assert "warning: /dev/shm is 64 MiB" in err and "--ipc=host" in err
    monkeypatch.setattr(env, "shm_gib", lambda: 16.0)
    run.warn_small_shm(cfg)
    run.warn_small_shm(RunConfig(mode="torch-ddp").resolve("cpu", 2))
    assert capsys.readouterr().err == ""


@pytest.mark.gpu
def test_gpu_run_records_physical_telemetry(out):
    r = bench("torch-ddp", "--device", "cuda", "--np", "1", "--model", "resnet50", "--batch-size", "64",
              "--warmup-steps", "5", "--steps-per-window", "20", "--windows", "3", "--telemetry-interval", "0.1",
              "--output", str(out))
    assert r.returncode == 0, r.stderr
    tele = only_result(out)["telemetry"]
    assert tele["available"] and tele["energy_j"] > 0 and tele["energy_per_sample_j"] > 0
    gpu = tele["nodes"][0]["gpus"][0]
    assert 10 < gpu["power_w_mean"] < 1500 and gpu["util_gpu_pct_max"] > 0  # physically plausible
    assert (out / only_result(out)["telemetry"]["samples_csv"]).is_file()


def test_every_rank_samples_its_own_gpu_and_a_partial_count_gives_no_per_sample_figure(monkeypatch):
    """Numbers issue, finding 6: under srun --gpus-per-task=1 each task sees one GPU; only local rank 0 sampled,
    and one GPU's energy was divided by every GPU's samples (N times too low). Every process now samples the
    GPU it drives, and telemetry that misses a device is marked partial with no per-sample figure."""
    from bench.launching.detect import own_gpu_indices

    assert own_gpu_indices(LaunchInfo("srun", 1, 2, 1, 2), 2) == [1]
    assert own_gpu_indices(LaunchInfo("srun", 1, 2, 1, 2), 1) == [0]  # --gpus-per-task=1: its own, as device 0
    nvml = FakeNVML([FakeGPU(power_w=250.0), FakeGPU(power_w=200.0)])
    monkeypatch.setattr(nvml_module, "load_nvml", lambda: (nvml, None))

    class Trainer:
        def own_gpus(self):
            return [1]

    cfg = RunConfig(mode="torch-ddp").resolve("cuda", 2)
    sampler, reason = telemetry.start_sampler(cfg, Trainer())
    assert sampler is not None and reason is None and sampler.labels == [1]  # local rank 1 samples its GPU
    one = TelemetryNode(gpus=[GpuTelemetry(energy_j=600.0, power_w_mean=300.0, throttled=False)])
    partial = telemetry.combine([one], samples=2000, samples_per_sec_total=1000.0, devices=2)
    assert partial.partial and partial.energy_per_sample_j is None and partial.samples_per_sec_per_watt is None
    whole = telemetry.combine([one, one], samples=2000, samples_per_sec_total=1000.0, devices=2)
    assert whole.partial is None and whole.energy_per_sample_j == 0.6
