"""GPU telemetry through NVML (nvidia-ml-py): a sampler per node, summaries aligned with the timed windows.

One sampler runs in every process, on the GPUs that process drives (its own GPU for a rank per GPU; all its
GPUs for a process that drives several), in a daemon thread: NVML calls go through ctypes, which
releases the GIL while the driver answers, so sampling does not stall the training loop. Each sample
holds, per GPU: utilisation (GPU, memory), memory used, power, SM and memory clocks, temperature,
clock-event (throttle) reasons, PCIe TX/RX and, where the GPU has it, NVLink TX/RX.

Honest absence: a value NVML cannot give (no NVML, no GPU, NotSupported, NoPermission...) is None,
with the reason recorded once per field under ``unavailable``; never 0.

Summary formulas (timed windows only: from the first window's start to the last window's end):

* energy_j per GPU = E(t_end) - E(t_start) from the GPU's total-energy counter
  (nvmlDeviceGetTotalEnergyConsumption, millijoules, Volta and newer), read at the two instants;
  where the counter is missing: the trapezoidal integral of the power samples in the interval
  (``energy_source`` says which).
* power: ``power_source`` is 'instant' (NVML_FI_DEV_POWER_INSTANT) or 'average' (nvmlDeviceGetPowerUsage,
  which recent drivers average over about a second).
* energy per sample (J/sample; J/img for images) = sum of energy over all GPUs of all nodes / samples processed in
  the timed windows.
* samples/s per watt = total samples/s / sum over GPUs of mean power in the interval.
* Both are given only when the GPUs sampled are exactly the run's devices (one per replica); otherwise the
  telemetry is marked ``partial`` and neither is given: one GPU's energy over every GPU's samples would
  under-report N times.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

from pydantic import Field

from bench.measure import nvml as nvml_module
from bench.measure.tracker import Ranks, Tracker, register
from bench.typed import Open


class GpuTelemetry(Open):
    """One GPU over the timed windows (bench.measure.telemetry.summarize_node)."""
    host: str | None = None
    gpu: int | None = Field(None, description="its NVML index")
    samples_in_windows: int = 0
    util_gpu_pct_mean: float | None = None
    util_gpu_pct_max: float | None = None
    mem_used_mib_peak: float | None = None
    power_w_mean: float | None = None
    energy_j: float | None = None
    energy_source: str | None = Field(None, description="counter, integrated power samples, or why there is none")
    throttle_reasons: list[str] = []
    throttled: bool = Field(False, description="a power or thermal slowdown reason was set in the windows")


class TelemetryNode(Open):
    """One sampler's GPUs (a process that drives GPUs) over the timed windows."""
    host: str | None = None
    interval_s: float | None = None
    timed_start: float | None = None
    timed_end: float | None = None
    power_source: str | None = None
    unavailable: dict[str, str] = Field({}, description="each field NVML could not read, and why")
    gpus: list[GpuTelemetry] = []


class Telemetry(Open):
    """NVML over the timed windows (bench.measure.telemetry); ``available`` false says why not."""
    available: bool
    reason: str | None = Field(None, description="why there is no telemetry")
    energy_per_sample_j: float | None = None
    samples_per_sec_per_watt: float | None = None
    energy_j: float | None = Field(None, description="every GPU's energy over the timed windows")
    power_w_mean_total: float | None = None
    throttled: bool | None = None
    nodes: list[TelemetryNode] = Field([], description="each sampler's GPUs over the timed windows")
    partial: str | None = Field(None, description="why the per-sample figures are missing although GPUs were "
                                "sampled: not every device of the run was")
    gpus_sampled: int | None = None
    samples_csv: str | None = Field(None, description="the time series beside the result")
    definitions: dict[str, str] | None = None


DEFAULT_INTERVAL_S = 0.5
THROTTLE_REASONS = {  # nvml clock-event reason bits worth naming
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}
# Reasons that mean the GPU ran slower than it could (idle and sync boost are not throttling).
SLOWDOWN_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
NVLINK = ("nvlink_tx_kbs", "nvlink_rx_kbs")


@dataclass
class GpuSample:
    """One GPU read once (a row of the telemetry time series, ``<run_id>-telemetry.csv``): None where NVML cannot
    give the value (the reason is in the sampler's ``unavailable``)."""
    t: float  # time.time() when read
    host: str
    gpu: int  # the label the run gives the GPU (its CUDA index in the process)
    util_gpu_pct: float | None
    util_mem_pct: float | None
    mem_used_mib: float | None
    power_w: float | None
    sm_clock_mhz: float | None
    mem_clock_mhz: float | None
    temperature_c: float | None
    throttle_reasons: int | None  # the clock-event reason bits (THROTTLE_REASONS)
    pcie_tx_kbs: float | None
    pcie_rx_kbs: float | None
    nvlink_tx_kbs: float | None
    nvlink_rx_kbs: float | None
    energy_mj: float | None  # the GPU's total-energy counter


COLUMNS = [f.name for f in fields(GpuSample)]  # the time series' header


def rows(samples: list[GpuSample]) -> list[dict[str, Any]]:
    """The samples as the time series' rows."""
    return [asdict(s) for s in samples]


@dataclass(frozen=True)
class Mark:
    """The energy counters read at an instant (the timed windows' start or end)."""
    t: float
    energy_mj: dict[int, float | None]  # per GPU label


def _reason(exc: Exception) -> str:
    return type(exc).__name__.replace("NVMLError_", "") if type(exc).__name__.startswith("NVMLError") else str(exc)


def physical_indices(local_devices: list[int], nvml) -> list[Any]:
    """NVML handles for CUDA device indices, honouring CUDA_VISIBLE_DEVICES (integers or UUIDs)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        return []
    handles = []
    for d in local_devices:
        if visible:
            entry = visible.split(",")[d].strip()
            if entry.isdigit():
                handles.append(nvml.nvmlDeviceGetHandleByIndex(int(entry)))
            else:
                handles.append(nvml.nvmlDeviceGetHandleByUUID(entry))
        else:
            handles.append(nvml.nvmlDeviceGetHandleByIndex(d))
    return handles


class Sampler:
    """Samples the given GPUs every ``interval_s`` seconds in a daemon thread."""

    def __init__(self, nvml, handles: list, gpu_labels: list[int], interval_s: float = DEFAULT_INTERVAL_S,
                 host: str = "") -> None:
        if not interval_s > 0:
            raise ValueError("telemetry interval must be > 0")
        self.nvml = nvml
        self.handles = handles
        self.labels = gpu_labels
        self.interval_s = interval_s
        self.host = host
        self.samples: list[GpuSample] = []
        self.unavailable: dict[str, str] = {}
        self.marks: dict[str, Mark] = {}
        self.power_source: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hvdbench-telemetry", daemon=True)

    # -- reading ---------------------------------------------------------------------------------
    def _get(self, field: str, fn, *args):
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            self.unavailable.setdefault(field, _reason(exc))
            return None

    def _power_w(self, h):
        nvml = self.nvml
        fi = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", None)
        if fi is not None and self.power_source != "average":
            try:
                (value,) = nvml.nvmlDeviceGetFieldValues(h, [fi])
                if getattr(value, "nvmlReturn", 0) == 0:
                    self.power_source = "instant"
                    return value.value.uiVal / 1000.0
            except nvml.NVMLError:
                pass
        mw = self._get("power_w", nvml.nvmlDeviceGetPowerUsage, h)
        if mw is not None:
            self.power_source = "average"
            return mw / 1000.0
        return None

    def _nvlink(self, h) -> tuple[float | None, float | None]:
        nvml = self.nvml
        tx_id = getattr(nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None)
        rx_id = getattr(nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None)
        reason = None
        if tx_id is None or NVLINK[0] in self.unavailable:
            reason = self.unavailable.get(NVLINK[0], "not offered by this nvidia-ml-py")
        else:
            try:
                tx, rx = nvml.nvmlDeviceGetFieldValues(h, [tx_id, rx_id])
                if getattr(tx, "nvmlReturn", 0) == 0:
                    return float(tx.value.ullVal), float(rx.value.ullVal)
                reason = "NotSupported"
            except nvml.NVMLError as exc:
                reason = _reason(exc)
        for name in NVLINK:
            self.unavailable.setdefault(name, reason)
        return None, None

    def read(self, h, t: float, gpu: int) -> GpuSample:
        nvml = self.nvml
        util = self._get("util_gpu_pct", nvml.nvmlDeviceGetUtilizationRates, h)
        if util is None:
            self.unavailable.setdefault("util_mem_pct", self.unavailable.get("util_gpu_pct", ""))
        mem = self._get("mem_used_mib", nvml.nvmlDeviceGetMemoryInfo, h)
        reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        nvlink_tx, nvlink_rx = self._nvlink(h)
        return GpuSample(
            t=t, host=self.host, gpu=gpu,
            util_gpu_pct=None if util is None else util.gpu,
            util_mem_pct=None if util is None else util.memory,
            mem_used_mib=None if mem is None else mem.used / 2**20,
            power_w=self._power_w(h),
            sm_clock_mhz=self._get("sm_clock_mhz", nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM),
            mem_clock_mhz=self._get("mem_clock_mhz", nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM),
            temperature_c=self._get("temperature_c", nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU),
            throttle_reasons=self._get("throttle_reasons", reasons_fn, h),
            pcie_tx_kbs=self._get("pcie_tx_kbs", nvml.nvmlDeviceGetPcieThroughput, h, nvml.NVML_PCIE_UTIL_TX_BYTES),
            pcie_rx_kbs=self._get("pcie_rx_kbs", nvml.nvmlDeviceGetPcieThroughput, h, nvml.NVML_PCIE_UTIL_RX_BYTES),
            nvlink_tx_kbs=nvlink_tx,
            nvlink_rx_kbs=nvlink_rx,
            energy_mj=self._get("energy_mj", nvml.nvmlDeviceGetTotalEnergyConsumption, h),
        )

    def sample_once(self) -> None:
        now = time.time()
        for label, h in zip(self.labels, self.handles, strict=True):
            self.samples.append(self.read(h, now, label))

    def mark(self, name: str) -> None:
        """Read the energy counters now (the timed windows start or end)."""
        energy = [self._get("energy_mj", self.nvml.nvmlDeviceGetTotalEnergyConsumption, h) for h in self.handles]
        self.marks[name] = Mark(t=time.time(), energy_mj=dict(zip(self.labels, energy, strict=True)))

    # -- thread ----------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.sample_once()

    def summary(self) -> TelemetryNode:
        return summarize_node(self.samples, self.marks, self.unavailable, self.power_source, self.host,
                              self.interval_s)


@dataclass
class Sampled:
    """One process's sampler at the end of the run (its part, bench.measure.tracker): the summary over the timed
    windows, and every raw sample (the time series beside the result)."""
    summary: TelemetryNode
    samples: list[GpuSample]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize_node(samples: list[GpuSample], marks: dict[str, Mark], unavailable: dict[str, str],
                   power_source: str | None, host: str, interval_s: float) -> TelemetryNode:
    """Per-GPU summary over the timed interval [marks['start'].t, marks['end'].t] (see the module doc)."""
    start, end = marks.get("start"), marks.get("end")
    if start is None or end is None:
        raise ValueError("the telemetry summary needs the timed windows' start and end marks")
    t0, t1 = start.t, end.t
    gpus = sorted({s.gpu for s in samples})
    per_gpu = []
    for g in gpus:
        every = [s for s in samples if s.gpu == g]
        window = [s for s in every if t0 <= s.t <= t1]
        power = [(s.t, s.power_w) for s in window if s.power_w is not None]
        e0, e1 = start.energy_mj.get(g), end.energy_mj.get(g)
        if e0 is not None and e1 is not None:
            energy, source = (e1 - e0) / 1000.0, "counter"
        elif len(power) >= 2:
            energy = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(power, power[1:], strict=False))
            source = "integrated power samples"
        else:
            energy, source = None, "unavailable: too few power samples in the timed windows"
        reasons = 0
        for s in window:
            reasons |= s.throttle_reasons or 0
        util = [s.util_gpu_pct for s in window if s.util_gpu_pct is not None]
        per_gpu.append(GpuTelemetry(
            host=host, gpu=g, samples_in_windows=len(window),
            util_gpu_pct_mean=_mean(util), util_gpu_pct_max=max(util) if util else None,
            mem_used_mib_peak=max((s.mem_used_mib for s in every if s.mem_used_mib is not None), default=None),
            power_w_mean=_mean([p for _, p in power]), energy_j=energy, energy_source=source,
            throttle_reasons=[name for bit, name in THROTTLE_REASONS.items() if reasons & bit],
            throttled=bool(reasons & SLOWDOWN_MASK),
        ))
    return TelemetryNode(host=host, interval_s=interval_s, timed_start=t0, timed_end=t1, power_source=power_source,
                         unavailable=unavailable, gpus=per_gpu)


def combine(nodes: list[TelemetryNode], samples: int, samples_per_sec_total: float, devices: int | None = None
            ) -> Telemetry:
    """Run-level figures from every sampler's summary (one per process that drives GPUs); ``devices`` is the
    run's device count (its world size in replicas): the per-sample figures need every one of them sampled."""
    gpus = [g for n in nodes for g in n.gpus]
    energies = [g.energy_j for g in gpus]
    powers = [g.power_w_mean for g in gpus]
    partial = None
    if devices is not None and len(gpus) != devices:
        partial = (f"{len(gpus)} GPU(s) sampled for a run on {devices}: no energy per sample or samples/s per "
                   "watt (the sums would cover other GPUs than the samples)")
    energy = sum(energies) if gpus and all(e is not None for e in energies) else None
    power = sum(powers) if gpus and all(p is not None for p in powers) else None
    whole = partial is None
    return Telemetry(
        available=True,
        partial=partial,
        gpus_sampled=len(gpus),
        nodes=nodes,
        energy_j=energy,
        energy_per_sample_j=energy / samples if whole and energy is not None and samples else None,
        power_w_mean_total=power,
        samples_per_sec_per_watt=samples_per_sec_total / power if whole and power else None,
        throttled=any(g.throttled for g in gpus),
        definitions={
            "energy_per_sample_j": "sum of GPU energy over the timed windows / samples in the timed windows",
            "samples_per_sec_per_watt": "total samples/s / sum of the GPUs' mean power in the timed windows",
        },
    )


def unavailable(reason: str) -> Telemetry:
    return Telemetry(available=False, reason=reason)


def start_sampler(cfg, trainer) -> tuple[Sampler | None, str | None]:
    """(sampler or None, reason when there is none). Every process samples the GPUs it drives itself (one for a
    rank per GPU, all its GPUs for a process that drives several): under srun --gpus-per-task=1 no process sees
    another's GPU, and one sampler per node would miss all but its own."""
    if not cfg.telemetry:
        return None, "turned off (--no-telemetry)"
    if cfg.device.value != "cuda":
        return None, f"no GPU in use (device {cfg.device.value})"
    import socket

    nvml, reason = nvml_module.load_nvml()
    if nvml is None:
        return None, reason
    gpus = trainer.own_gpus()
    return Sampler(nvml, physical_indices(gpus, nvml), gpus, cfg.telemetry_interval, socket.gethostname()), None


@register
class TelemetryTracker(Tracker):
    """The NVML sampler of this process's GPUs, from set-up to the end; the energy counters read exactly when the
    timed windows start and end. Its part: the summary and the samples (Sampled), or why nothing was sampled."""
    name = field = "telemetry"
    model = Telemetry

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.sampler: Sampler | None = None
        self.note: str | None = "the run ended before its sampler started"

    def started(self) -> None:
        self.sampler, self.note = start_sampler(self.ctx.cfg, self.ctx.trainer)
        if self.sampler is not None:
            self.sampler.start()

    def windows_open(self) -> None:
        if self.sampler is not None:
            self.sampler.mark("start")

    def after_windows(self) -> None:
        if self.sampler is not None:
            self.sampler.mark("end")

    def finished(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()

    def part(self) -> Sampled | str:
        if self.sampler is None:
            return self.note or "no telemetry sampler ran"
        return Sampled(summary=self.sampler.summary(), samples=self.sampler.samples)

    @classmethod
    def section(cls, job: Ranks) -> Telemetry:
        parts = job.parts(cls.name)
        nodes = [p.summary for p in parts if isinstance(p, Sampled)]
        if not nodes:
            return unavailable(parts[0] if isinstance(parts[0], str) else "no telemetry sampler ran")
        timed_samples = job.world * job.cfg.batch_size * job.timed_steps
        tele = combine(nodes, timed_samples, job.rate, job.world)
        tele.samples_csv = f"{job.run_id}-telemetry.csv"
        return tele

    @classmethod
    def rows(cls, section: Telemetry) -> list[tuple[str, str, str]]:
        if not section.available:
            return [("GPU telemetry", "unavailable", section.reason or "")]
        power = "n/a" if section.power_w_mean_total is None else f"{section.power_w_mean_total:.0f}"
        return [("GPU power, mean total", power, "W"),
                ("throttling seen", "yes" if section.throttled else "no", "power/thermal slowdown reasons")]


def samples_of(ranks) -> list[GpuSample]:
    """Every process's raw samples, for the time series beside the result."""
    return [s for r in ranks if isinstance(p := r.parts.get(TelemetryTracker.name), Sampled) for s in p.samples]
