"""bench peak: this device's achievable matrix-multiply rate (a GEMM sweep, bench.measure.device_peak), the measured
peak that results' MFU uses; written to OUTPUT/peak/ and shown as a table of shapes."""

from __future__ import annotations

from dataclasses import dataclass

from bench.config import check_declared, option
from bench.launching import envs, supervise
from bench.measure import device_peak
from bench.records import peaks
from bench.vocabulary import Device, Precision


@dataclass(frozen=True)
class PeakConfig:
    """bench peak's configuration: each option declared once, here (the command's flags come from it)."""
    device: Device = option(Device.auto, "Where to measure (auto: the first GPU, else the CPU).")
    precision: Precision = option(Precision.fp32, "The runs' precision to measure at (fp32 is TF32 on a GPU, as in "
                                  "the runs).")
    np: int = option(2, "CPU: the ranks that will share this node's cores; each gets the same thread share a run "
                     "of that many ranks gives them.", flag="--np", aliases=("-np",), minimum=1)
    seconds: float = option(0.5, "Seconds each timed repeat of a shape lasts.", positive=True, unit="seconds")
    repeats: int = option(3, "Timed repeats per shape (their median is the shape's rate).", minimum=1)
    output: str = option("results", "Results directory: the peak goes to OUTPUT/peak/, where runs with this "
                         "--output find it.")

    def __post_init__(self) -> None:
        check_declared(self)


def main(cfg: PeakConfig) -> None:
    """Measure, write the record, print the shapes' rates and the peak."""
    envs.enter("torch")
    import torch
    from rich.console import Console
    from rich.table import Table

    device = device_peak.torch_device(torch, cfg.device)
    threads = supervise.cpu_thread_share(cfg.np) if device == Device.cpu else None
    record = peaks.record(device_peak.measure(device.value, cfg.precision.value, threads, cfg.seconds,
                                              cfg.repeats))
    path = peaks.write(cfg.output, record)
    table = Table(title=f"GEMM rate: {record.device}, {record.dtype}")
    for column in ("M", "N", "K", "TFLOP/s (median)", "repeats"):
        table.add_column(column, justify="right")
    for row in record.shapes:
        table.add_row(str(row.m), str(row.n), str(row.k), f"{row.tflops_median:.4g}",
                      " ".join(f"{r:.4g}" for r in row.tflops))
    console = Console()
    console.print(table)
    console.print(f"peak: {record.peak_tflops:.4g} TFLOP/s at {'x'.join(map(str, record.peak_shape))}")
    console.print(f"result: {path}")
