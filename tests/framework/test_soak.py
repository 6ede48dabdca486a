"""bench soak's load on PyTorch's CPU (bench.measure.soak.GemmLoad): real products, real rates, the deterministic
product bit for bit the same on every load of a device and after the load as before it, and a device whose
product comes out one bit off once loaded is found."""

from __future__ import annotations

import torch

from bench.commands.soak import SoakConfig, measure
from bench.measure import soak
from bench.vocabulary import Device


class OneBitOff(soak.GemmLoad):
    """A device whose product has one element's lowest bit flipped once it has run the load (a hot fault)."""
    loaded = False

    def window(self, seconds):
        self.loaded = True
        return super().window(seconds)

    def product(self):
        product = super().product()
        if self.loaded:
            product.view(torch.int32)[0, 0] ^= 1
        return product


def test_a_cpu_soak_measures_its_rate_and_its_product_and_says_the_rest_is_not_measured():
    record = measure(SoakConfig(device=Device.cpu, seconds=1.0, window=0.25, size=256))
    (cpu,) = record.devices
    assert cpu.label.startswith("cpu (") and len(cpu.window_tflops) == 4 and min(cpu.window_tflops) > 0
    assert cpu.digest_before == cpu.digest_after and len(cpu.digest_before) == 64
    assert record.gpu_reason and record.seconds >= 1.0 and record.size == 256 and record.dtype == "float32"
    assert {f.check for f in record.findings if f.status == "n/a"} >= {"throttle", "temperature", "power", "ecc"}


def test_the_product_is_bit_for_bit_the_same_on_every_load_and_one_bit_off_is_found():
    loads = [soak.GemmLoad(torch, "cpu", 128, torch.float32) for _ in range(2)]
    loads.append(OneBitOff(torch, "cpu", 128, torch.float32))
    runs, taken = soak.drive(loads, 0.4, 0.2)
    assert taken >= 0.4 and all(len(r.rates) == 2 and r.error is None for r in runs)
    assert runs[0].before == runs[1].before == runs[2].before == runs[0].after == runs[1].after
    assert runs[2].after != runs[2].before
    found = soak.judge([soak.device_record(r) for r in runs], soak.Limits(), "a CPU soak")
    errors = [f for f in found if f.check == "result" and f.status == "error"]
    assert len(errors) == 1 and "after the load" in errors[0].detail
