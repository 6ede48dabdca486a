"""``bench soak``: a sustained load on every GPU of the node, sampled by NVML throughout and judged as operators
accept a node (bench.measure.soak has what is judged and how): throttle reasons at every sample, the temperature
spread, each GPU's rate against the node's best, power against its limit, ECC before and after, and one
deterministic product compared bit for bit across the GPUs and before and after. ``--device cpu`` runs the CPU
form (its rate and its product; the rest is n/a). The record goes to OUTPUT/soak/; exit 1 on an error
(``--exit-codes nagios``: 0, 1, 2 or 3).
"""

from __future__ import annotations

import json
import socket
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.config import check_declared, option
from bench.errors import check_exit_codes, judged, nagios
from bench.launching import envs
from bench.measure import device_peak, env_faults, soak, telemetry, thresholds
from bench.measure.device_peak import PRECISION_DTYPE
from bench.measure.nvml import load_nvml
from bench.records import node_patch, store
from bench.records.header import header, new_run_id, utc_stamp
from bench.records.kinds import Soak
from bench.records.node_patch import NODE_HELP, NODE_PATCH_HELP
from bench.vocabulary import Device, Precision

MARK = {"error": "[red]error[/]", "warning": "[yellow]warning[/]", "ok": "[green]ok[/]", "n/a": "n/a"}
SERIES = ("t", "temperature_c", "sm_clock_mhz", "power_w", "throttle_reasons")


@dataclass(frozen=True)
class SoakConfig:
    """bench soak's configuration: each option declared once, here (the command's flags come from it)."""
    seconds: float = option(300.0, "How long the load lasts.", positive=True, unit="seconds")
    window: float = option(5.0, "Seconds per window: each device's rate is kept per window.", positive=True,
                           unit="seconds")
    device: Device = option(Device.auto, "Where to run it: auto (every GPU PyTorch sees, else the CPU), cuda or cpu "
                                         "(the CPU form: no throttle, temperature, power or ECC to read).")
    precision: Precision = option(Precision.fp32, "The load's precision (fp32 is TF32 on a GPU; amp-bf16 loads the "
                                                  "tensor cores harder). The compared product is always FP32.")
    size: int = option(0, "The load's N (N x N products); 0: 8192 on a GPU, 1024 on the CPU.", minimum=0)
    interval: float = option(1.0, "Seconds between NVML samples.", positive=True, unit="seconds")
    temperature_spread: float = option(soak.Limits.temperature_spread_c, "Warn when the GPUs' peak temperatures "
                                       "spread over more than this (C).", positive=True, unit="C")
    below_best: float = option(soak.Limits.below_best_pct, "Fail a GPU whose median rate is more than this % below "
                               "the node's best.", positive=True, unit="%")
    window_drop: float = option(soak.Limits.window_drop_pct, "Warn when a device's slowest window is more than this "
                                "% below its median.", positive=True, unit="%")
    thresholds: str = option("", "A threshold pack (TOML, docs/soak.md) over the shipped ones: the ECC counts "
                                 "after the soak are held to the published limits of each GPU's model.")
    output: str = option("results", "Results directory: the record goes to OUTPUT/soak/.")
    as_json: bool = option(False, "Print the findings as JSON: one object per finding.", flag="--json")
    exit_codes: str = option("bench", "Exit statuses: bench (1 on an error), or nagios (0 ok, 1 a warning, 2 an "
                                      "error, 3 could not check).")
    node_patch: str = option("", NODE_PATCH_HELP)
    node: str = option("", NODE_HELP)

    def __post_init__(self) -> None:
        check_declared(self)
        check_exit_codes(self.exit_codes)

    def limits(self) -> soak.Limits:
        return soak.Limits(temperature_spread_c=self.temperature_spread, below_best_pct=self.below_best,
                           window_drop_pct=self.window_drop)


def main(cfg: SoakConfig) -> int:
    """bench soak: run, write the record, print every finding."""
    return judged(lambda: report(cfg), cfg.exit_codes)


def _exact(torch):
    """Switch TF32 off (True) for the compared product, back on (False) for the load, as fp32 runs use it."""
    def switch(on: bool) -> None:
        if torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = not on
    return switch


def measure(cfg: SoakConfig, packs: thresholds.Packs | None = None) -> Soak:
    envs.enter("torch")
    import torch

    device = device_peak.torch_device(torch, cfg.device)
    size = cfg.size or (soak.GPU_SIZE if device == Device.cuda else soak.CPU_SIZE)
    dtype = getattr(torch, PRECISION_DTYPE[cfg.precision.value])
    if device == Device.cuda:
        loads = [soak.GemmLoad(torch, f"cuda:{i}", size, dtype) for i in range(torch.cuda.device_count())]
    else:
        loads = [soak.GemmLoad(torch, "cpu", size, dtype)]
    nvml, gpu_reason, handles = None, "a CPU soak: no GPU to read", []
    if device == Device.cuda:
        nvml, gpu_reason = load_nvml()
        if nvml is not None:
            handles = telemetry.physical_indices(list(range(len(loads))), nvml)
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in handles]
    return run(cfg, torch.__version__, loads, size, PRECISION_DTYPE[cfg.precision.value], nvml, handles,
               gpu_reason, _exact(torch), packs)


def run(cfg: SoakConfig, torch_version: str, loads: list, size: int, dtype: str, nvml, handles: list,
        gpu_reason: str | None, exact, packs: thresholds.Packs | None = None) -> Soak:
    """The soak over ``loads`` with NVML's ``handles`` (one per load, or none): the record; each GPU's ECC
    counters after it held to its model's threshold ``packs``. Tests give fakes."""
    limits = cfg.limits()
    held: list[env_faults.Finding] = []
    sampler = None
    before, power = [], []
    if nvml is not None and handles:
        before = [soak.ecc_counts(nvml, h) for h in handles]
        power = [soak.power_limits(nvml, h) for h in handles]
        sampler = telemetry.Sampler(nvml, handles, list(range(len(handles))), cfg.interval, socket.gethostname())
    try:
        runs, taken = soak.drive(loads, cfg.seconds, cfg.window, sampler, exact)
        after = [soak.ecc_counts(nvml, h) for h in handles] if sampler else []
        if sampler and packs is not None:
            for load, h in zip(loads, handles, strict=True):
                name, _ = soak.nvml_value(nvml, "nvmlDeviceGetName", h)
                name = name.decode() if isinstance(name, bytes) else name
                held += env_faults.pack_findings(nvml, h, name, load.label, packs, check="ecc")
    finally:
        if nvml is not None:
            nvml.nvmlShutdown()
    devices = [soak.device_record(r) for r in runs]
    if sampler:
        gpu_reason = None
        for i, d in enumerate(devices):
            samples = soak.under_load(sampler.samples, i)
            d["nvml"] = soak.gpu_figures(samples, before[i], after[i], power[i])
            d["series"] = {name: [getattr(s, name) for s in samples] for name in SERIES}
    found = soak.judge(devices, limits, gpu_reason) + held
    resolved = {k: (v.value if hasattr(v, "value") else v) for k, v in asdict(cfg).items()}
    return Soak(**header(new_run_id("soak"), store.Kind.SOAK), host=socket.gethostname(), config=resolved,
                torch=torch_version, size=size, dtype=dtype, seconds=taken,
                devices=devices, gpu_reason=gpu_reason, limits=limits.as_dict(), limits_source="bench soak's "
                "options (defaults: bench/measure/soak.py Limits); ECC counts: the threshold packs "
                "(bench/measure/thresholds.py, --thresholds), each finding naming its source",
                findings=[f.as_dict() for f in found], passed=not any(f.status == "error" for f in found),
                definitions={"window_tflops": "2 x N^3 x products in the window / the window's time, the device "
                             "done", "digest": "SHA-256 of a 1024 x 1024 FP32 product of seeded inputs, TF32 off",
                             "throttled": "a sample whose clock-event reasons hold a slowdown bit "
                             f"(mask {telemetry.SLOWDOWN_MASK:#x})"})


def write(output: str | Path, record: Soak) -> Path:
    """OUTPUT/soak/<host>-<UTC time>.json, a new file, written whole (bench.records.store)."""
    folder = Path(output) / "soak"
    folder.mkdir(parents=True, exist_ok=True)
    return store.write(folder / f"{record.host}-{utc_stamp()}-{record.run_id[-8:]}.json", record)


def report(cfg: SoakConfig) -> int:
    packs = thresholds.load(cfg.thresholds or None)  # a bad pack, node name or folder: one line before the load
    node = node_patch.prepare(cfg.node_patch, cfg.node)
    record = measure(cfg, packs)
    path = write(cfg.output, record)
    errors = sum(f.status == "error" for f in record.findings)
    warnings = sum(f.status == "warning" for f in record.findings)
    if cfg.as_json:
        print(json.dumps([f.model_dump() for f in record.findings], indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table("check", "member", "status", "finding",
                      title=f"bench soak on {record.host}: {record.seconds:.0f} s, N={record.size} {record.dtype}")
        for f in record.findings:
            table.add_row(f.check, f.member, MARK.get(f.status, f.status), f.detail)
        Console().print(table)
    print(f"soak: {errors} error(s), {warnings} warning(s); record: {path}", file=sys.stderr)
    if cfg.node_patch:
        for line in node_patch.write(cfg.node_patch, node, "soak", node_patch.named(record.findings, "error"),
                                     node_patch.named(record.findings, "warning"), utc_stamp(), str(path)):
            print(line, file=sys.stderr)
    if cfg.exit_codes == "nagios":
        return nagios(errors, warnings)
    return 1 if errors else 0
