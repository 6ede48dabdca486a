"""The metric registry: every figure a result reports, with its unit, direction and definition.

The results.csv columns, the terminal table, the report's columns and ``bench compare``'s metrics are all
made from this list, so a metric is defined once. Throughput is counted in samples; the workload says
what a sample is (an image for the CNNs) and the unit is printed in its words (img/s). Text workloads
add tokens/s beside samples/s. A label says "per {dev}": "per GPU" for a run on GPUs, "per rank" for a CPU run,
whose ranks are processes sharing the host's cores, not devices (label_for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.errors import BenchError

if TYPE_CHECKING:
    from bench.records.schema import Result


@dataclass(frozen=True)
class Metric:
    key: str  # where it lives: result.<section>.<key>
    section: str  # "summary", "timing" or "telemetry"
    label: str  # its name in tables; "{dev}" is the device word (GPU, rank: device_word)
    unit: str  # "{s}" is the workload's sample symbol (img), e.g. "{s}/s"
    higher_is_better: bool
    definition: str
    in_table: bool = True  # shown in the terminal table
    fmt: str = ".2f"  # how tables print it

    def value(self, result: Result) -> float | None:
        return getattr(getattr(result, self.section), self.key, None)

    def unit_for(self, result: Result) -> str:
        return self.unit.replace("{s}", sample_symbol(result))

    def label_for(self, result: Result | None = None, dev: str | None = None) -> str:
        """The label in the words of ``result``'s devices (or of ``dev``)."""
        return self.label.replace("{dev}", dev or (device_word(result) if result is not None else "device"))


def device_word(result: Result) -> str:
    """What one unit of the world size is: a GPU for a run on CUDA devices, else a rank (a process on the CPU)."""
    return "GPU" if result.config.cuda else "rank"


def devices_word(results: list[Result]) -> str:
    """The device word shared by ``results``: GPU, rank, or device where they mix."""
    words = {device_word(r) for r in results}
    return words.pop() if len(words) == 1 else "device"


def sample_symbol(result: Result) -> str:
    """The workload's short word for one sample: img, seq."""
    return result.workload.symbol.split("/")[0]


METRICS: dict[str, Metric] = {m.key: m for m in (
    Metric("samples_per_sec_total", "summary", "throughput, total (all ranks)", "{s}/s", True,
           "every sample all ranks processed in the timed windows over the slowest rank's total time in them "
           "(warmup excluded)"),
    Metric("samples_per_sec_per_gpu", "summary", "throughput, per {dev}", "{s}/s", True,
           "samples_per_sec_total / world size (GPUs, or ranks on the CPU)"),
    Metric("samples_per_sec_rank0_x_world", "summary", "rank 0 x world size", "{s}/s", True,
           "rank 0's own samples/s times the world size: what Horovod's scripts print"),
    Metric("samples_per_sec_wall_train", "summary", "wall-clock throughput", "{s}/s", True,
           "every sample after init over the slowest rank's train_s (warmup included)"),
    Metric("samples_per_sec_wall_total", "summary", "wall throughput incl. init", "{s}/s", True,
           "every sample after init over init_s + train_s: time to a trained model from process start",
           in_table=False),
    Metric("tokens_per_sec_total", "summary", "tokens/s, total", "tokens/s", True,
           "samples_per_sec_total x tokens per sample (text workloads)"),
    Metric("tokens_per_sec_per_gpu", "summary", "tokens/s, per {dev}", "tokens/s", True,
           "tokens_per_sec_total / world size (text workloads)"),
    Metric("model_tflops_per_gpu", "summary", "model TFLOP/s per {dev}", "TFLOP/s", True,
           "workload.train_flops_per_sample x samples_per_sec_per_gpu / 1e12 (MFU = this / the device's peak)",
           fmt=".3g"),
    Metric("init_s", "timing", "init", "s", False,
           "process start to the end of the first (synchronised) training step; slowest rank"),
    Metric("first_step_s", "timing", "first step", "s", False, "the first training step; slowest rank", fmt=".3f"),
    Metric("train_s", "timing", "train", "s", False,
           "end of init to the end of the last timed window, warmup included; slowest rank"),
    Metric("energy_per_sample_j", "telemetry", "energy per sample", "J/{s}", False,
           "sum of GPU energy over the timed windows / samples in the timed windows"),
    Metric("samples_per_sec_per_watt", "telemetry", "samples/s per watt", "{s}/s/W", True,
           "total samples/s / sum of the GPUs' mean power in the timed windows"),
)}

# Names of schema 1 (image-only results), still accepted where a metric is named.
OLD_NAMES = {"images_per_sec_total": "samples_per_sec_total", "images_per_sec_per_gpu": "samples_per_sec_per_gpu",
             "images_per_sec_rank0_x_world": "samples_per_sec_rank0_x_world",
             "images_per_sec_wall_train": "samples_per_sec_wall_train",
             "images_per_sec_wall_total": "samples_per_sec_wall_total", "energy_per_image_j": "energy_per_sample_j",
             "images_per_sec_per_watt": "samples_per_sec_per_watt"}


def find(name: str) -> Metric:
    metric = METRICS.get(OLD_NAMES.get(name, name))
    if metric is None:
        raise BenchError(f"unknown metric '{name}' (choose from: {', '.join(METRICS)})")
    return metric
