"""bench soak's judging (bench.measure.soak) over figures and over a whole soak of fake loads read by the fake NVML
(tests/fake_nvml.py): a GPU that throttles, heats or slows, ECC errors that grow, a GPU whose product differs."""

from __future__ import annotations

import time

import pytest

from bench.commands.soak import SoakConfig, run
from bench.errors import BenchError
from bench.measure import soak
from bench.records.kinds import Soak
from tests.fake_nvml import FakeGPU, FakeNVML

LIMITS = soak.Limits()


def device(label="cuda:0 NVIDIA H100 80GB HBM3", rates=(100.0, 101.0, 99.0), digest="d", after=None, read=True,
           **nvml):
    """A device's record as bench.commands.soak builds it; ``nvml``: the GPU's figures that differ from a
    healthy one's (read=False: no NVML figures, as on the CPU)."""
    model = label.split(" ", 1)[1] if label.startswith("cuda") else "cpu"
    record = {"label": label, "model": model, "window_tflops": list(rates), "median_tflops": sorted(rates)[1],
              "digest_before": digest, "digest_after": after or digest, "error": None}
    if read and label.startswith("cuda"):
        record["nvml"] = {"samples": 10, "throttle_samples_read": 10, "throttled_samples": 0,
                          "throttle_reasons_seen": [], "temperature_max_c": 60.0, "temperature_median_c": 58.0,
                          "sm_clock_median_mhz": 1980, "sm_clock_min_mhz": 1980, "power_mean_w": 600.0,
                          "power_limit_w": 700.0, "power_default_limit_w": 700.0, "power_of_limit": 600 / 700,
                          "ecc_before": {"corrected": 0, "uncorrected": 0},
                          "ecc_after": {"corrected": 0, "uncorrected": 0}, **nvml}
    return record


def by_check(found, check):
    return [(f.member, f.status) for f in found if f.check == check]


def gpus(n=4, overrides=None):
    """``n`` healthy H100s, GPU i with ``overrides[i]`` (device's arguments)."""
    return [device(f"cuda:{i} NVIDIA H100 80GB HBM3", **(overrides or {}).get(i, {})) for i in range(n)]


def test_a_healthy_node_passes_every_check():
    found = soak.judge(gpus(), LIMITS, None)
    assert {f.status for f in found} == {"ok"}, found
    assert {f.check for f in found} == {"throughput", "result", "throttle", "temperature", "power", "ecc"}


def test_a_gpu_more_than_ten_percent_below_the_nodes_best_fails_and_one_within_passes():
    found = soak.judge(gpus(3, {1: {"rates": (85.0, 89.0, 88.0)}, 2: {"rates": (91.0, 92.0, 93.0)}}), LIMITS, None)
    assert ("cuda:1 NVIDIA H100 80GB HBM3", "error") in by_check(found, "throughput")
    assert ("cuda:2 NVIDIA H100 80GB HBM3", "ok") in by_check(found, "throughput")
    line = next(f.detail for f in found if f.status == "error")
    assert "12.0% below the node's best (100)" in line and "10% allowed" in line


def test_a_rate_that_does_not_hold_over_its_windows_is_a_warning():
    found = soak.judge([device("cpu (2 threads)", rates=(10.0, 10.2, 8.0, 10.1, 10.0))], LIMITS, "a CPU soak")
    assert by_check(found, "throughput")[0] == ("cpu (2 threads)", "warning")


def test_a_product_that_differs_is_named_by_the_majority_or_else_the_whole_group():
    found = soak.judge(gpus(3, {2: {"digest": "x"}}), LIMITS, None)
    assert by_check(found, "result") == [("cuda:2 NVIDIA H100 80GB HBM3", "error")]
    found = soak.judge(gpus(2, {1: {"digest": "x"}}), LIMITS, None)
    assert by_check(found, "result") == [("NVIDIA H100 80GB HBM3", "error")]
    assert "no majority" in next(f.detail for f in found if f.check == "result")


def test_a_product_that_changes_under_load_is_an_error_even_on_one_device():
    found = soak.judge([device("cpu (2 threads)", digest="a", after="b")], LIMITS, "a CPU soak")
    assert by_check(found, "result") == [("cpu (2 threads)", "error")]


def test_gpus_of_different_models_are_not_compared():
    found = soak.judge([device("cuda:0 NVIDIA H100 80GB HBM3"), device("cuda:1 NVIDIA H100 PCIe", digest="x")],
                       LIMITS, None)
    assert [s for _, s in by_check(found, "result")] == ["ok"]


def test_throttle_temperature_power_and_ecc_findings():
    found = soak.judge(gpus(2, {
        0: {"throttled_samples": 3, "throttle_reasons_seen": ["sw_power_cap"], "power_limit_w": 500.0},
        1: {"temperature_max_c": 67.0, "ecc_after": {"corrected": 2, "uncorrected": 1}}}), LIMITS, None)
    assert by_check(found, "throttle")[0] == ("cuda:0 NVIDIA H100 80GB HBM3", "error")
    assert "sw_power_cap in 3 of 10 samples" in next(f.detail for f in found if f.check == "throttle")
    assert by_check(found, "temperature") == [("node", "warning")]
    assert "spread 7 C (at most 5 C)" in next(f.detail for f in found if f.check == "temperature")
    assert by_check(found, "power")[0] == ("cuda:0 NVIDIA H100 80GB HBM3", "warning")
    assert by_check(found, "ecc") == [("cuda:0 NVIDIA H100 80GB HBM3", "ok"), ("cuda:1 NVIDIA H100 80GB HBM3", "error")]
    found = soak.judge(gpus(1, {0: {"ecc_after": {"corrected": 2, "uncorrected": 0}}}), LIMITS, None)
    assert by_check(found, "ecc") == [("cuda:0 NVIDIA H100 80GB HBM3", "warning")]


def test_what_a_cpu_soak_cannot_measure_is_n_a_with_why_never_ok():
    found = soak.judge([device("cpu (2 threads)", read=False)], LIMITS, "a CPU soak: no GPU to read")
    for check in ("throttle", "temperature", "power", "ecc"):
        assert by_check(found, check) == [("-", "n/a")]
    assert all("a CPU soak" in f.detail for f in found if f.status == "n/a" and f.check != "throughput")


def test_a_failed_load_is_an_error():
    record = device("cuda:0 NVIDIA H100 80GB HBM3")
    record.update(error="RuntimeError: CUDA error: an illegal memory access", window_tflops=[], median_tflops=None)
    found = soak.judge([record], LIMITS, None)
    assert by_check(found, "load") == [("cuda:0 NVIDIA H100 80GB HBM3", "error")]


class FakeLoad:
    """A GPU's load without a GPU: a window sleeps its seconds and reports ``rate``; ``digests`` before, after."""

    def __init__(self, index, rate=100.0, digests=("d", "d"), model="NVIDIA H100 80GB HBM3"):
        self.label, self.model, self.rate, self.digests = f"cuda:{index} {model}", model, rate, list(digests)

    def warm(self):
        pass

    def window(self, seconds):
        time.sleep(seconds)
        return self.rate

    def digest(self):
        return self.digests.pop(0)


def soak_of(gpus_, loads, packs=None, **cfg):
    nvml = FakeNVML(gpus_)
    cfg = SoakConfig(**{"seconds": 0.6, "window": 0.2, "interval": 0.05, **cfg})
    return run(cfg, "2.13.0", loads, 1024, "float32", nvml, [nvml.nvmlDeviceGetHandleByIndex(i)
                                                            for i in range(len(gpus_))], None, lambda on: None,
               packs)


def test_a_whole_soak_read_by_nvml_finds_each_fault_as_it_grows():
    """GPU 0 is healthy; GPU 1 heats past the spread and starts to hit its power cap; GPU 2 slows and its
    uncorrected ECC count grows; GPU 3's product differs from the others' once it is hot."""
    faults = [FakeGPU(),
              FakeGPU(temperature=[60, 64, 68, 70], throttle=[0, 0, 0x4]),
              FakeGPU(sm_clock=[1980, 1500], ecc_uncorrected=[0, 1]),
              FakeGPU()]
    loads = [FakeLoad(0), FakeLoad(1), FakeLoad(2, rate=80.0), FakeLoad(3, digests=("d", "x"))]
    record = soak_of(faults, loads)
    Soak.model_validate(record.model_dump())
    status = {(f.check, f.member.split(" ")[0]): f.status for f in record.findings}
    assert status[("throttle", "cuda:0")] == "ok" and status[("throttle", "cuda:1")] == "error"
    assert status[("temperature", "node")] == "warning"
    assert status[("throughput", "cuda:2")] == "error" and status[("ecc", "cuda:2")] == "error"
    assert status[("result", "cuda:3")] == "error"
    assert not record.passed and record.gpu_reason is None
    gpu2 = record.devices[2]
    assert gpu2.nvml["sm_clock_min_mhz"] == 1500 and gpu2.nvml["ecc_before"]["uncorrected"] == 0
    assert len(gpu2.series["t"]) == gpu2.nvml["samples"] >= 3  # every sample kept


def test_a_healthy_fake_node_passes_and_keeps_its_raw_figures():
    record = soak_of([FakeGPU(), FakeGPU()], [FakeLoad(0), FakeLoad(1, rate=99.0)])
    assert record.passed, [f for f in record.findings if f.status != "ok"]
    assert [len(d.window_tflops) for d in record.devices] == [3, 3]
    assert record.devices[0].nvml["power_of_limit"] == pytest.approx(300 / 700)


def test_ecc_a_gpu_does_not_report_is_n_a():
    record = soak_of([FakeGPU(ecc_uncorrected=None, ecc_corrected=None)], [FakeLoad(0)])
    assert [(f.status, f.detail) for f in record.findings if f.check == "ecc"] == [
        ("n/a", "ECC counts not read: NotSupported")]


def test_ecc_counts_after_the_soak_are_held_to_each_gpu_models_published_limits():
    """Azure's ND H100 v5 pack (bench/measure/thresholds.py): SRAM correctable ECC errors over 10000 fail the GPU,
    the limit and its source named; a model no pack has is not held, nor is any GPU without packs."""
    from bench.measure import thresholds

    sram = (0, 1, 7)  # corrected, aggregate, SRAM (tests/fake_nvml.py)
    node = [FakeGPU(counters={sram: 10001}), FakeGPU(counters={sram: 10000}),
            FakeGPU(name="NVIDIA A100-SXM4-80GB", counters={sram: 99999})]
    loads = [FakeLoad(0), FakeLoad(1), FakeLoad(2, model="NVIDIA A100-SXM4-80GB")]
    record = soak_of(node, loads, thresholds.load())
    over = [(f.member, f.detail) for f in record.findings if f.check == "ecc" and f.status == "error"]
    assert [m for m, _ in over] == ["cuda:0 NVIDIA H100 80GB HBM3"] and not record.passed
    assert over[0][1].startswith("SRAM ECC errors corrected aggregate 10001 over the 10000 allowed (Azure ND H100 "
                                 "v5 health checks: Azure/azurehpc-health-checks@0e0a1ac")
    node = [FakeGPU(counters={sram: 10001})]
    assert soak_of(node, [FakeLoad(0)]).passed


@pytest.mark.parametrize("options, line", [({"seconds": 0}, "--seconds"), ({"window": -1}, "--window"),
                                           ({"exit_codes": "icinga"}, "--exit-codes")])
def test_bad_options_get_one_line(options, line):
    with pytest.raises(BenchError, match=line):
        SoakConfig(**options)
