"""A fake NVML with nvidia-ml-py's function names, signatures, constants and error classes.

Each fake GPU has a script of behaviour: power in watts (or None: NotSupported), an energy counter
that integrates that power over real time (or NotSupported, as on pre-Volta GPUs), throttle bits, and
whether instant power (a field value) is offered. Throttle bits, temperature, SM clock and the ECC counts may
each be a list instead: a sequence over time, each read taking the next value and the last one repeating (a GPU
that heats, slows or starts to throttle under a soak); ECC counts of None are NotSupported. A GPU has a name and
may have ECC counters by location (``counters``: (error type, counter, location) -> count).
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
NVML_TEMPERATURE_GPU = 0
NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
NVML_FI_DEV_POWER_INSTANT = 186
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_SUCCESS, NVML_ERROR_NOT_SUPPORTED = 0, 3
NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
NVML_MEMORY_LOCATION_DRAM, NVML_MEMORY_LOCATION_SRAM = 2, 7


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 (nvidia-ml-py's spelling)
    pass


class FakeGPU:
    def __init__(self, power_w: float | None = 300.0, energy: bool = True, instant_power: bool = True,
                 throttle: int | list[int] = 0, nvlink: bool = False, temperature: float | list[float] = 61,
                 sm_clock: int | list[int] = 1980, ecc_corrected: int | list[int] | None = 0,
                 ecc_uncorrected: int | list[int] | None = 0, power_limit_w: float | None = 700.0,
                 default_limit_w: float | None = 700.0, name: str = "NVIDIA H100 80GB HBM3",
                 counters: dict | None = None) -> None:
        self.name, self.counters = name, counters or {}  # (error type, counter, location) -> count
        self.power_w, self.energy, self.instant, self.nvlink = power_w, energy, instant_power, nvlink
        self.power_limit_w, self.default_limit_w = power_limit_w, default_limit_w
        self.scripts = {"throttle": throttle, "temperature": temperature, "sm_clock": sm_clock,
                        "ecc_corrected": ecc_corrected, "ecc_uncorrected": ecc_uncorrected}
        self.reads = {name: 0 for name in self.scripts}
        self.t0 = time.time()

    def next(self, name: str):
        """The value of a script at this read: a constant, or a sequence's next value (the last one repeats)."""
        script = self.scripts[name]
        if not isinstance(script, list):
            return script
        value = script[min(self.reads[name], len(script) - 1)]
        self.reads[name] += 1
        return value

    @property
    def throttle(self):
        return self.scripts["throttle"]

    def energy_mj(self) -> int:
        return int((time.time() - self.t0) * (self.power_w or 0) * 1000)


class FakeNVML:
    """Use as the ``nvml`` argument of bench.measure.telemetry.Sampler; counts calls."""

    def __init__(self, gpus: list[FakeGPU]) -> None:
        self.gpus = gpus
        self.calls = 0
        self._lock = threading.Lock()
        for name, value in globals().items():
            if name.startswith("NVML") or name == "NVMLError":
                setattr(self, name, value)

    def _count(self):
        with self._lock:
            self.calls += 1

    def nvmlInit(self):  # noqa: N802
        pass

    def nvmlShutdown(self):  # noqa: N802
        pass

    def nvmlDeviceGetCount(self):  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int):  # noqa: N802
        return self.gpus[index]

    def nvmlDeviceGetUtilizationRates(self, h):  # noqa: N802
        self._count()
        return SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):  # noqa: N802
        self._count()
        return SimpleNamespace(used=10 * 2**30, total=80 * 2**30, free=70 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h):  # noqa: N802
        self._count()
        if h.power_w is None:
            raise NVMLError_NotSupported("Not Supported")
        return int(h.power_w * 1000)

    def nvmlDeviceGetFieldValues(self, h, field_ids):  # noqa: N802
        self._count()
        out = []
        for fid in field_ids:
            ok = (fid == NVML_FI_DEV_POWER_INSTANT and h.instant and h.power_w is not None) or \
                (fid in (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX) and h.nvlink)
            value = SimpleNamespace(uiVal=int((h.power_w or 0) * 1000), ullVal=123456)
            out.append(SimpleNamespace(fieldId=fid, nvmlReturn=NVML_SUCCESS if ok else NVML_ERROR_NOT_SUPPORTED,
                                       value=value))
        return out

    def nvmlDeviceGetClockInfo(self, h, clock):  # noqa: N802
        self._count()
        return h.next("sm_clock") if clock == NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, h, sensor):  # noqa: N802
        self._count()
        return h.next("temperature")

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):  # noqa: N802
        self._count()
        return h.next("throttle")

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):  # noqa: N802
        self._count()
        value = h.next("ecc_corrected" if kind == NVML_MEMORY_ERROR_TYPE_CORRECTED else "ecc_uncorrected")
        if value is None:
            raise NVMLError_NotSupported("Not Supported")
        return value

    def nvmlDeviceGetName(self, h):  # noqa: N802
        return h.name

    def nvmlDeviceGetMemoryErrorCounter(self, h, kind, counter, location):  # noqa: N802
        """ECC counts by location; one the GPU's ``counters`` lacks is NotSupported."""
        if (kind, counter, location) not in h.counters:
            raise NVMLError_NotSupported("Not Supported")
        return h.counters[(kind, counter, location)]

    def nvmlDeviceGetEnforcedPowerLimit(self, h):  # noqa: N802
        if h.power_limit_w is None:
            raise NVMLError_NotSupported("Not Supported")
        return int(h.power_limit_w * 1000)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):  # noqa: N802
        if h.default_limit_w is None:
            raise NVMLError_NotSupported("Not Supported")
        return int(h.default_limit_w * 1000)

    def nvmlDeviceGetPcieThroughput(self, h, counter):  # noqa: N802
        self._count()
        return 1000 if counter == NVML_PCIE_UTIL_TX_BYTES else 2000

    def nvmlDeviceGetTotalEnergyConsumption(self, h):  # noqa: N802
        self._count()
        if not h.energy:
            raise NVMLError_NotSupported("Not Supported")
        return h.energy_mj()
