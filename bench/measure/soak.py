"""A soak: a sustained load on every GPU of the node while NVML samples them, judged as operators accept a node.

Each device runs the same N x N matrix product in a loop, in its own thread, for the soak's seconds, cut into
equal windows. A window's rate is 2 x N^3 x products / the window's time (TFLOP/s), its clock read once the
device has finished the window's work. NVML (bench.measure.telemetry.Sampler) samples every GPU throughout.
Before the load and after it, every device computes one deterministic product (FP32 inputs from a seeded
generator, TF32 off) and its SHA-256 is kept.

Judged, each a finding with its threshold (Limits, the command's options):

* **throttle**: a slowdown reason in any sample under load (SW power cap, HW slowdown, SW or HW thermal
  slowdown, power brake: telemetry.SLOWDOWN_MASK) is an error; operators accept "throttle reasons 0x0 for the
  whole soak". Idle and sync boost are no slowdown.
* **temperature**: spread = the hottest GPU's peak - the coolest GPU's peak, over the samples under load; above
  ``temperature_spread_c`` a warning (uneven cooling: a fan, a blocked inlet).
* **throughput**: each GPU's median window rate against the node's best GPU's; more than ``below_best_pct``
  below it is an error (gpu-fryer's rule). Each device's slowest window against its own median; more than
  ``window_drop_pct`` below it is a warning (a rate that does not hold).
* **power**: mean power under load / the enforced power limit, shown; an enforced limit below the GPU's default
  limit is a warning (the GPU was capped).
* **ecc**: the volatile uncorrected ECC count grown during the soak is an error, the corrected count a warning;
  with threshold packs (bench.measure.thresholds), each GPU's counts by location after the soak over its
  model's published limits are errors (bench.commands.soak).
* **result**: the deterministic product's digest must be the same on every device of the same model, and the
  same after the load as before it; a difference is silent data corruption, an error.
* **load**: a device whose load failed (a CUDA error, a lost GPU) is an error.

What cannot be measured (no GPU, no NVML, a query the GPU does not answer) is n/a with why, never ok.
"""

from __future__ import annotations

import hashlib
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from bench.measure import telemetry
from bench.measure.env_faults import Finding

SEED = 20261203
DIGEST_SIZE = 1024  # the deterministic product's N
GPU_SIZE, CPU_SIZE = 8192, 1024  # the load's N by default
NAMES = {bit: name for bit, name in telemetry.THROTTLE_REASONS.items()}


@dataclass(frozen=True)
class Limits:
    """The soak's thresholds (module docstring). Defaults: the operators' rules the issue's sources give: about
    5 C across a node's GPUs, every GPU within 10% of the node's best (gpu-fryer), a rate that holds within 10%."""
    temperature_spread_c: float = 5.0
    below_best_pct: float = 10.0
    window_drop_pct: float = 10.0

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class GemmLoad:
    """One device's load: the N x N product in a loop, and the deterministic product's digest."""

    def __init__(self, torch, device: str, size: int, dtype) -> None:
        self.torch, self.device, self.size = torch, torch.device(device), size
        self.label = (f"{device} {torch.cuda.get_device_name(self.device)}" if self.device.type == "cuda"
                      else f"cpu ({torch.get_num_threads()} threads)")
        self.model = self.label.split(" ", 1)[1] if self.device.type == "cuda" else "cpu"
        self.a = torch.randn(size, size, device=self.device, dtype=dtype)
        self.b = torch.randn(size, size, device=self.device, dtype=dtype)
        self.c = torch.empty(size, size, device=self.device, dtype=dtype)
        self.per_batch = 1

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def warm(self, batch_s: float = 0.1) -> None:
        """Run it twice (the library picks its kernel), then size a batch of products to about ``batch_s``."""
        for _ in range(2):
            self.torch.matmul(self.a, self.b, out=self.c)
        self.sync()
        start = time.perf_counter()
        self.torch.matmul(self.a, self.b, out=self.c)
        self.sync()
        self.per_batch = max(1, int(batch_s / max(time.perf_counter() - start, 1e-6)))

    def window(self, seconds: float) -> float:
        """Products in batches until ``seconds`` have passed with the device done: the window's TFLOP/s."""
        start, calls = time.perf_counter(), 0
        while True:
            for _ in range(self.per_batch):
                self.torch.matmul(self.a, self.b, out=self.c)
            self.sync()
            calls += self.per_batch
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return 2 * self.size**3 * calls / elapsed / 1e12

    def product(self):
        """The deterministic product (seeded FP32 inputs, made on the host, multiplied here), on the host."""
        torch = self.torch
        generator = torch.Generator().manual_seed(SEED)
        a = torch.randn(DIGEST_SIZE, DIGEST_SIZE, generator=generator).to(self.device)
        b = torch.randn(DIGEST_SIZE, DIGEST_SIZE, generator=generator).to(self.device)
        return torch.matmul(a, b).cpu().contiguous()

    def digest(self) -> str:
        """SHA-256 of the deterministic product's bytes."""
        return hashlib.sha256(self.product().numpy().tobytes()).hexdigest()


@dataclass
class DeviceRun:
    """What one device's load gave: its windows' rates, its digests, its error."""
    load: Any
    rates: list[float] = field(default_factory=list)
    before: str | None = None
    after: str | None = None
    error: str | None = None


def _drive(run: DeviceRun, windows: int, window_s: float, stop: threading.Event) -> None:
    try:
        run.load.warm()
        for _ in range(windows):
            if stop.is_set():
                return
            run.rates.append(run.load.window(window_s))
    except Exception as exc:  # noqa: BLE001 (a device's failure is its finding, the others go on)
        run.error = f"{type(exc).__name__}: {exc}".splitlines()[0]


def _digests(runs: list[DeviceRun], attribute: str, exact: Callable[[bool], None]) -> None:
    exact(True)
    try:
        for run in runs:
            if run.error is None:
                try:
                    setattr(run, attribute, run.load.digest())
                except Exception as exc:  # noqa: BLE001
                    run.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
    finally:
        exact(False)


def drive(loads: list, seconds: float, window_s: float, sampler=None, exact: Callable[[bool], None] = lambda on: None
          ) -> tuple[list[DeviceRun], float]:
    """Every load in its own thread for ``seconds`` (windows of about ``window_s``), the digests before and after
    with ``exact(True)`` in force (TF32 off), the sampler running through the load: (the runs, seconds taken)."""
    runs = [DeviceRun(load) for load in loads]
    _digests(runs, "before", exact)
    windows = max(1, round(seconds / window_s))
    stop = threading.Event()
    threads = [threading.Thread(target=_drive, args=(run, windows, seconds / windows, stop), daemon=True,
                                name=f"hvdbench-soak-{i}") for i, run in enumerate(runs)]
    start = time.monotonic()
    if sampler is not None:
        sampler.start()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)
    finally:
        stop.set()
        if sampler is not None:
            sampler.stop()
    taken = time.monotonic() - start
    _digests(runs, "after", exact)
    return runs, taken


# -- NVML readings before and after --------------------------------------------------------------------------

def nvml_value(nvml, fn_name: str, *args) -> tuple[Any, str | None]:
    fn = getattr(nvml, fn_name, None)
    if fn is None:
        return None, f"{fn_name} is not in this nvidia-ml-py"
    try:
        return fn(*args), None
    except nvml.NVMLError as exc:
        return None, type(exc).__name__.replace("NVMLError_", "") or str(exc)


def ecc_counts(nvml, handle) -> dict[str, Any]:
    """Volatile (since the driver loaded) corrected and uncorrected ECC counts, or why there are none."""
    out: dict[str, Any] = {}
    for name, kind in (("corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
                       ("uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED")):
        value, why = nvml_value(nvml, "nvmlDeviceGetTotalEccErrors", handle, getattr(nvml, kind, None),
                                 getattr(nvml, "NVML_VOLATILE_ECC", None))
        out[name] = value
        if why:
            out[f"{name}_why"] = why
    return out


def power_limits(nvml, handle) -> dict[str, Any]:
    """The enforced and the default power limits in watts (None with why where NVML does not give them)."""
    out: dict[str, Any] = {}
    for name, fn in (("limit_w", "nvmlDeviceGetEnforcedPowerLimit"),
                     ("default_limit_w", "nvmlDeviceGetPowerManagementDefaultLimit")):
        value, why = nvml_value(nvml, fn, handle)
        out[name] = None if value is None else value / 1000.0
        if why:
            out[f"{name}_why"] = why
    return out


# -- judging --------------------------------------------------------------------------------------------------

def _pct_below(value: float, reference: float) -> float:
    return 100.0 * (reference - value) / reference if reference > 0 else 0.0


def under_load(samples: list[telemetry.GpuSample], gpu: int) -> list[telemetry.GpuSample]:
    return [s for s in samples if s.gpu == gpu]


def gpu_figures(samples: list[telemetry.GpuSample], ecc_before: dict, ecc_after: dict, power: dict
                ) -> dict[str, Any]:
    """One GPU's NVML figures over its samples under load (None where none was read)."""
    def values(name):
        return [getattr(s, name) for s in samples if getattr(s, name) is not None]

    reasons = values("throttle_reasons")
    slowed = [r & telemetry.SLOWDOWN_MASK for r in reasons]
    seen = sorted({name for r in slowed for bit, name in NAMES.items() if r & bit})
    temps, clocks, watts = values("temperature_c"), values("sm_clock_mhz"), values("power_w")
    mean_w = statistics.fmean(watts) if watts else None
    return {
        "samples": len(samples),
        "throttle_samples_read": len(reasons),
        "throttled_samples": sum(1 for r in slowed if r),
        "throttle_reasons_seen": seen,
        "temperature_max_c": max(temps) if temps else None,
        "temperature_median_c": statistics.median(temps) if temps else None,
        "sm_clock_median_mhz": statistics.median(clocks) if clocks else None,
        "sm_clock_min_mhz": min(clocks) if clocks else None,
        "power_mean_w": mean_w,
        "power_limit_w": power.get("limit_w"),
        "power_default_limit_w": power.get("default_limit_w"),
        "power_of_limit": (mean_w / power["limit_w"]) if mean_w is not None and power.get("limit_w") else None,
        "ecc_before": ecc_before,
        "ecc_after": ecc_after,
    }


def judge(devices: list[dict[str, Any]], limits: Limits, gpu_reason: str | None) -> list[Finding]:
    """The findings (module docstring) over the devices' records: label, model, window_tflops, median_tflops,
    digest_before, digest_after, error, and on a GPU ``nvml`` (gpu_figures) or ``nvml_why``."""
    out: list[Finding] = []
    for d in devices:
        if d.get("error"):
            out.append(Finding("load", d["label"], "error", f"the load failed: {d['error']}: drain the node and "
                               "read its kernel log (bench preflight)"))
    out += _throughput(devices, limits)
    out += _results(devices)
    gpus = [d for d in devices if "nvml" in d]
    if not gpus:
        why = gpu_reason or "no GPU"
        for check in ("throttle", "temperature", "power", "ecc"):
            out.append(Finding(check, "-", "n/a", f"not measured: {why}"))
        return out
    out += _throttle(gpus) + _temperature(gpus, limits) + _power(gpus) + _ecc(gpus)
    return out


def _throughput(devices: list[dict[str, Any]], limits: Limits) -> list[Finding]:
    out = []
    ran = [d for d in devices if d.get("median_tflops")]
    best = max((d["median_tflops"] for d in ran), default=None)
    for d in ran:
        median, rates = d["median_tflops"], d["window_tflops"]
        text = f"median {median:.4g} TFLOP/s over {len(rates)} window(s)"
        if len(ran) > 1:
            below = _pct_below(median, best)
            if below > limits.below_best_pct:
                out.append(Finding("throughput", d["label"], "error", f"{text}: {below:.1f}% below the node's "
                                   f"best ({best:.4g}), over the {limits.below_best_pct:g}% allowed: a slow GPU"))
                continue
            text += f", {below:.1f}% below the node's best (at most {limits.below_best_pct:g}%)"
        drop = _pct_below(min(rates), median)
        if drop > limits.window_drop_pct:
            out.append(Finding("throughput", d["label"], "warning", f"{text}; its slowest window {min(rates):.4g} "
                               f"is {drop:.1f}% below its median, over {limits.window_drop_pct:g}%: the rate did "
                               "not hold (clocks, heat, or other work on the node)"))
        else:
            out.append(Finding("throughput", d["label"], "ok", f"{text}; slowest window {drop:.1f}% below its "
                               f"median (at most {limits.window_drop_pct:g}%)"))
    if len(ran) == 1 and len(devices) == 1:
        out.append(Finding("throughput", "node", "n/a", "one device: no node's best to hold it against"))
    return out


def _results(devices: list[dict[str, Any]]) -> list[Finding]:
    out = []
    for d in devices:
        if d.get("digest_before") and d.get("digest_after") and d["digest_before"] != d["digest_after"]:
            out.append(Finding("result", d["label"], "error", "the deterministic product differs after the load "
                               "from before it: silent data corruption; drain the node and have the GPU checked"))
    by_model: dict[str, list[dict[str, Any]]] = {}
    for d in devices:
        if d.get("digest_before"):
            by_model.setdefault(d["model"], []).append(d)
    for model, group in by_model.items():
        if len(group) < 2:
            continue
        counts: dict[str, int] = {}
        for d in group:
            counts[d["digest_before"]] = counts.get(d["digest_before"], 0) + 1
        common, n = max(counts.items(), key=lambda kv: kv[1])
        if len(counts) == 1:
            out.append(Finding("result", model, "ok", f"the deterministic product is bit for bit the same on "
                               f"all {len(group)} devices"))
        elif n > len(group) - n:
            for d in group:
                if d["digest_before"] != common:
                    out.append(Finding("result", d["label"], "error", f"its deterministic product differs from the "
                                       f"other {n} {model}'s: silent data corruption; drain the node and have "
                                       "the GPU checked"))
        else:
            members = ", ".join(d["label"] for d in group)
            out.append(Finding("result", model, "error", f"the deterministic product differs between {members}, "
                               "with no majority to say which is wrong: drain the node and have them checked"))
    if not any(f.check == "result" for f in out):
        single = [d for d in devices if d.get("digest_after")]
        if single:
            out.append(Finding("result", single[0]["label"] if len(single) == 1 else "node", "ok",
                               "the deterministic product is the same after the load as before it"
                               + (" (one device of its model: nothing to compare it with)" if len(single) == 1
                                  else "")))
    return out


def _throttle(gpus: list[dict[str, Any]]) -> list[Finding]:
    out = []
    for d in gpus:
        n = d["nvml"]
        if not n["throttle_samples_read"]:
            out.append(Finding("throttle", d["label"], "n/a", "NVML gave no clock-event reasons"))
        elif n["throttled_samples"]:
            out.append(Finding("throttle", d["label"], "error", f"{', '.join(n['throttle_reasons_seen'])} in "
                               f"{n['throttled_samples']} of {n['throttle_samples_read']} samples under load "
                               "(0 allowed): the GPU ran below its clocks; check cooling, power and "
                               "nvidia-smi -q -d PERFORMANCE"))
        else:
            out.append(Finding("throttle", d["label"], "ok", f"no slowdown reason in {n['throttle_samples_read']} "
                               "samples under load"))
    return out


def _temperature(gpus: list[dict[str, Any]], limits: Limits) -> list[Finding]:
    peaks = {d["label"]: d["nvml"]["temperature_max_c"] for d in gpus if d["nvml"]["temperature_max_c"] is not None}
    if not peaks:
        return [Finding("temperature", "node", "n/a", "NVML gave no temperature")]
    hottest, coolest = max(peaks, key=peaks.get), min(peaks, key=peaks.get)
    spread = peaks[hottest] - peaks[coolest]
    text = (f"peak {peaks[coolest]:g}-{peaks[hottest]:g} C across {len(peaks)} GPU(s): spread {spread:g} C "
            f"(at most {limits.temperature_spread_c:g} C)")
    if len(peaks) == 1:
        return [Finding("temperature", hottest, "ok", f"peak {peaks[hottest]:g} C (one GPU: no spread)")]
    if spread > limits.temperature_spread_c:
        return [Finding("temperature", "node", "warning", f"{text}; hottest {hottest}: uneven cooling "
                        "(a fan, an inlet, airflow)")]
    return [Finding("temperature", "node", "ok", text)]


def _power(gpus: list[dict[str, Any]]) -> list[Finding]:
    out = []
    for d in gpus:
        n = d["nvml"]
        limit, default, mean = n["power_limit_w"], n["power_default_limit_w"], n["power_mean_w"]
        shown = (f"mean {mean:.0f} W" if mean is not None else "power not read") + \
            (f" of a {limit:.0f} W limit ({n['power_of_limit']:.0%})" if limit and n["power_of_limit"] is not None
             else "")
        if limit and default and limit < default:
            out.append(Finding("power", d["label"], "warning", f"{shown}: the enforced limit is below the GPU's "
                               f"default {default:.0f} W (capped: nvidia-smi -q -d POWER)"))
        elif mean is None and not limit:
            out.append(Finding("power", d["label"], "n/a", "NVML gave neither power nor its limit"))
        else:
            out.append(Finding("power", d["label"], "ok", shown))
    return out


def _ecc(gpus: list[dict[str, Any]]) -> list[Finding]:
    out = []
    for d in gpus:
        before, after = d["nvml"]["ecc_before"], d["nvml"]["ecc_after"]
        grown = {k: after[k] - before[k] for k in ("corrected", "uncorrected")
                 if before.get(k) is not None and after.get(k) is not None}
        if not grown:
            why = before.get("uncorrected_why") or after.get("uncorrected_why") or "not read"
            out.append(Finding("ecc", d["label"], "n/a", f"ECC counts not read: {why}"))
        elif grown.get("uncorrected", 0) > 0:
            out.append(Finding("ecc", d["label"], "error", f"{grown['uncorrected']} new uncorrected ECC error(s) "
                               "during the soak: drain the node and have the GPU checked (nvidia-smi -q -d ECC)"))
        elif grown.get("corrected", 0) > 0:
            out.append(Finding("ecc", d["label"], "warning", f"{grown['corrected']} new corrected ECC error(s) "
                               "during the soak (none uncorrected): watch it"))
        else:
            out.append(Finding("ecc", d["label"], "ok", "no new ECC error during the soak"))
    return out


def device_record(run: DeviceRun) -> dict[str, Any]:
    rates = run.rates
    return {"label": run.load.label, "model": run.load.model, "window_tflops": rates,
            "median_tflops": statistics.median(rates) if rates else None, "digest_before": run.before,
            "digest_after": run.after, "error": run.error}
