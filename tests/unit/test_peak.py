"""bench.measure.device_peak: the published peaks by exact device name; bench.records.peaks: the measured peak's
files, and MFU in a result."""

import json

import pytest

from bench.measure import device_peak
from bench.records import peaks
from bench.records.kinds import Peak
from bench.records.results import utilisation_record
from bench.records.store import Kind
from tests import samples


def test_published_peaks_by_exact_name_and_precision():
    assert device_peak.spec_peak("NVIDIA H100 80GB HBM3", "amp-bf16")[0] == 989.4
    assert device_peak.spec_peak("NVIDIA H100 80GB HBM3", "fp32")[0] == 494.7  # fp32 runs use TF32 on a GPU
    assert device_peak.spec_peak("NVIDIA H100 PCIe", "amp-fp16")[0] == 756.5
    assert device_peak.spec_peak("NVIDIA H200", "amp-bf16")[0] == 989.4
    assert device_peak.spec_peak("NVIDIA A100-SXM4-80GB", "amp-bf16")[0] == 312.0
    assert device_peak.spec_peak("NVIDIA B200", "amp-bf16")[0] == 2250.0


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 4090", "NVIDIA H100", "Tesla V100-SXM2-16GB",
                                  "NVIDIA H100 80GB HBM3 ", "", None])
def test_an_unlisted_device_gets_no_published_peak(name):
    """Never another device's figure: a name that is not exactly in the table has none, and says so."""
    value, why = device_peak.spec_peak(name, "amp-bf16")
    assert value is None and "no spec peak" in why


@pytest.mark.parametrize("label, slug", [("cpu (2 threads)", "cpu-2t"),
                                         ("cpu (4 threads, TensorFlow's default)", "cpu-4t"),
                                         ("cuda:1 NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3")])
def test_device_slugs(label, slug):
    assert device_peak.device_slug(label) == slug


def measured(tflops, host="node1", device="cpu (2 threads)", precision="fp32"):
    return Peak(**{**samples.record(Kind.PEAK), "host": host, "device": device, "precision": precision,
                   "peak_tflops": tflops})


def test_the_newest_measured_peak_is_used_and_none_is_overwritten(tmp_path, monkeypatch):
    assert peaks.load_measured(tmp_path, "node1", "cpu (2 threads)", "fp32")[0] is None
    records = [measured(0.1), measured(0.2), measured(9.0, device="cpu (1 threads)")]  # (the last: another
    times = iter(["20261124T010000Z", "20261124T020000Z", "20261124T030000Z"])  # thread share, not this device)
    monkeypatch.setattr(peaks, "utc_stamp", lambda: next(times))
    first, second, _ = (peaks.write(tmp_path, r) for r in records)
    assert first != second and first.is_file() and json.loads(first.read_text())["peak_tflops"] == 0.1
    assert peaks.load_measured(tmp_path, "node1", "cpu (2 threads)", "fp32") == (0.2, str(second))
    assert peaks.load_measured(tmp_path, "node2", "cpu (2 threads)", "fp32")[0] is None
    assert peaks.load_measured(tmp_path, "node1", "cpu (2 threads)", "amp-bf16")[0] is None


class _Cfg:
    class precision:  # noqa: N801 (the enum's shape)
        value = "fp32"

    def __init__(self, output):
        self.output = str(output)


def test_mfu_against_both_peaks_with_a_fake_nvml_name(tmp_path):
    """TensorFlow's device label has no model name: NVML's is used; a listed name gets the spec MFU, an
    unlisted one none."""
    peaks.write(tmp_path, measured(400.0, device="cuda:0 NVIDIA H100 80GB HBM3"))
    rank0 = samples.rank(0, host="node1", device="/physical_device:GPU:0")
    u = utilisation_record(_Cfg(tmp_path), 100.0, rank0, {"nvml": {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}})
    assert u.spec_peak_tflops == 494.7 and u.mfu_spec == pytest.approx(100 / 494.7)
    assert u.measured_peak_tflops == 400.0 and u.mfu_measured == pytest.approx(0.25)
    u = utilisation_record(_Cfg(tmp_path), 100.0, samples.rank(0, host="node1", device="cuda:0 NVIDIA L4"), {})
    assert u.spec_peak_tflops is None and u.mfu_spec is None and "'NVIDIA L4' is not in the table" in \
        u.spec_peak_source
    assert u.mfu_measured is None  # no peak measured on an L4
    u = utilisation_record(_Cfg(tmp_path), None, rank0, {})
    assert u.mfu_measured is None and u.mfu_spec is None  # a model with no FLOP count
