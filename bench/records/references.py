"""Reference figures a result is held against ("is my number good?"): this project's own GPU measurements and the
published anchors, each with the conditions it was measured under, and any the user adds.

A reference matches a result when its GPU (words of the result's GPU name: "H100 80GB HBM3" in "NVIDIA H100 80GB
HBM3"), its mode (or any mode of its framework, for a published figure made with other code), model, precision,
batch per device, image size, memory format, tuning (bench.records.describe.tuning_of: "" for the paper's eager
loop) and world size (a per-GPU figure at one GPU is no measure of an 8-GPU run, whose share would hold its scaling
too) are the result's, and the reference trained on synthetic data as the result did (``data``: NVIDIA's TensorFlow
figures read ImageNet, so they match no run here and are named as the nearest instead). A variant's word in the
result's GPU name that the reference's does not say (a MIG slice, an NVL or PCIe card) matches no full-size SXM
row. This project's own
figures are tried first, the published ones after::

    share = the result's samples/s per device / the reference's samples/s per device

Where none matches a synthetic GPU run, one line says which references that GPU has and how the nearest (the
fewest settings apart) differs from the run, or that it has none (:func:`unmatched`).

A user's own: ``HVDBENCH_REFERENCES=FILE``, a JSON list of objects with :class:`Reference`'s fields (per_device,
gpu, model, precision, batch_size, source required), tried before the shipped ones.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.errors import BenchError
from bench.modes import mode as mode_spec
from bench.records.describe import device_of, source_of, tuning_of

if TYPE_CHECKING:
    from bench.records.schema import Result

USER_ENV = "HVDBENCH_REFERENCES"


@dataclass(frozen=True)
class Reference:
    gpu: str  # words of NVML's name: "H100 80GB HBM3" (SXM), "H200"
    model: str
    precision: str
    batch_size: int  # per device
    per_device: float  # samples/s per device
    source: str  # who measured it, where it is written down
    date: str = ""  # when, where known
    mode: str | None = None  # None: any mode of ``framework``
    framework: str = "torch"
    image_size: int = 224
    channels_last: bool = False
    tuning: str = ""
    runs: int | None = None  # repeats behind the figure, where known
    conditions: str = ""
    world_size: int = 1  # the GPUs it was measured on; a result of another world size does not match
    data: str = "synthetic"  # what it trained on; a result matches synthetic figures only (results on files: none)

    def label(self) -> str:
        layout = ", channels-last" if self.channels_last else ""
        tuning = f", {self.tuning}" if self.tuning else ""
        runs = "" if self.runs is None else f", {self.runs} run{'s' * (self.runs != 1)}"
        when = f", {self.date}" if self.date else ""
        gpus = "one GPU" if self.world_size == 1 else f"{self.world_size} GPUs"
        data = "" if self.data == "synthetic" else f", {self.data}"
        return (f"{self.per_device:,.0f}/s per GPU, {self.mode or self.framework} {self.model} {self.precision} "
                f"batch {self.batch_size}{layout}{tuning}{data} on {gpus}, {self.gpu} ({self.source}{when}{runs})")


def _own(gpu: str, page: str, rows: list[tuple[str, str, str, float, bool]]) -> list[Reference]:
    return [Reference(gpu, model, precision, 64, rate, f"hvdbench GPU check, docs/measured/{page}", "2026-11-26",
                      mode=mode, channels_last=nhwc, runs=1,
                      conditions="one GPU, synthetic 224 x 224, PyTorch 2.11.0+cu130, driver 580.159.04")
            for mode, model, precision, rate, nhwc in rows]


def _lambda() -> list[Reference]:
    """Lambda's 2023 PyTorch benchmarks of ResNet-50 (github.com/lambdal/deeplearning-benchmark,
    pytorch/pytorch-train-throughput-fp16.csv and -fp32.csv for the rates, pytorch-train-bs-*.csv for the batches:
    their fork of NVIDIA's DeepLearningExamples code in NGC's PyTorch 22.10, PyTorch 1.13, CUDA 11.8, driver
    520.61.05, synthetic data, NCHW, eager; fp16 is AMP, fp32 is TF32 on these GPUs). A row of several GPUs is the
    node's total, divided here into its per-GPU rate, its batch the node's divided the same way."""
    conditions = ("Lambda's fork of NVIDIA's DeepLearningExamples PyTorch ResNet-50 (NGC PyTorch 22.10, CUDA 11.8), "
                  "synthetic, NCHW, eager")
    # (NVML's name for the card, GPUs, (AMP img/s for the node, batch per GPU), (TF32 img/s for the node, batch))
    rows = [("A100-SXM4-80GB", 1, (1582, 1280), (1066, 640)), ("A100-SXM4-80GB", 8, (11439, 1280), (7397, 640)),
            ("A100 80GB PCIe", 1, (1527, 1280), (1014, 640)), ("A100 80GB PCIe", 2, (2979, 1280), (1957, 640)),
            ("A100-PCIE-40GB", 1, (1396, 720), (882, 360)),
            ("H100 PCIe", 1, (1866, 1280), (1197, 640)), ("H100 PCIe", 8, (14713, 1280), (9397, 640))]
    return [Reference(gpu, "resnet50", precision, batch, round(node / gpus, 1), "Lambda, published", "2023",
                      conditions=conditions + (", TF32" if precision == "fp32" else ""), world_size=gpus)
            for gpu, gpus, amp, tf32 in rows for precision, (node, batch) in (("amp-fp16", amp), ("fp32", tf32))]


def _nvidia_tensorflow() -> list[Reference]:
    """NVIDIA's TensorFlow ResNet-50 v1.5 on a DGX A100 (github.com/NVIDIA/DeepLearningExamples,
    TensorFlow/Classification/ConvNets/resnet50v1.5/README.md read at commit 1d4211f, "Training performance: NVIDIA
    DGX A100 (8x A100 40GB)", added June 2020): training/training_perf.sh in NGC's TensorFlow 20.06-tf1-py3, batch 256
    per GPU, XLA, 500 timed iterations after 200 on ImageNet TFRecords, averaged; AMP is fp16 (static loss scale 128),
    the other TF32. The 8-GPU row is the node's total, divided here into its per-GPU rate."""
    conditions = ("NVIDIA's TensorFlow ResNet-50 v1.5 (NGC TensorFlow 20.06-tf1), DGX A100, ImageNet TFRecords, XLA, "
                  "Horovod over mpiexec for 8 GPUs")
    rows = [(1, 2375, 909), (8, 17400, 7000)]  # (GPUs, AMP img/s of the node, TF32 img/s of the node)
    return [Reference("A100-SXM4-40GB", "resnet50", precision, 256, round(node / gpus, 1),
                      "NVIDIA DeepLearningExamples, published", "2020-06", framework="tensorflow", tuning="XLA",
                      conditions=conditions + (", TF32" if precision == "fp32" else ""), world_size=gpus,
                      data="ImageNet TFRecords")
            for gpus, amp, tf32 in rows for precision, node in (("amp-fp16", amp), ("fp32", tf32))]


SHIPPED: tuple[Reference, ...] = (
    *_own("H200", "2026-11-26-gpu-check-h200.md", [
        ("torch-single", "vgg16", "fp32", 1379.0, False), ("torch-ddp", "vgg16", "fp32", 1354.9, False),
        ("torch-single", "vgg16", "amp-bf16", 2168.0, False), ("torch-ddp", "vgg16", "amp-bf16", 2121.0, False),
        ("torch-single", "vgg16", "amp-fp16", 2100.7, False), ("torch-ddp", "vgg16", "amp-fp16", 2065.7, False),
        ("torch-single", "resnet50", "fp32", 1993.7, False), ("torch-ddp", "resnet50", "fp32", 1914.2, False),
        ("torch-single", "resnet50", "amp-bf16", 2223.9, False), ("torch-ddp", "resnet50", "amp-bf16", 2116.0, False),
        ("torch-ddp", "resnet50", "amp-bf16", 2190.0, True),
        ("torch-single", "resnet50", "amp-fp16", 2544.8, False), ("torch-ddp", "resnet50", "amp-fp16", 2247.5, False),
        ("torch-ddp", "resnet50", "amp-fp16", 2577.9, True)]),
    *_own("H100 80GB HBM3", "2026-11-26-gpu-check-h100.md", [
        ("torch-single", "vgg16", "fp32", 1227.0, False), ("torch-ddp", "vgg16", "fp32", 1205.1, False),
        ("torch-horovod", "vgg16", "fp32", 1229.2, False),
        ("torch-single", "vgg16", "amp-bf16", 1978.9, False), ("torch-ddp", "vgg16", "amp-bf16", 1925.9, False),
        ("torch-single", "vgg16", "amp-fp16", 1884.9, False),
        ("torch-ddp", "resnet50", "amp-bf16", 1698.4, False),
        ("torch-horovod", "resnet50", "amp-bf16", 2024.8, False)]),
    # Lambda's published PyTorch ResNet-50 (NVIDIA's DeepLearningExamples code, synthetic, NCHW, eager)
    Reference("H100 80GB HBM3", "resnet50", "amp-fp16", 1280, 2791.0, "Lambda, published",
              conditions="NVIDIA's DeepLearningExamples PyTorch ResNet-50, synthetic, NCHW, eager"),
    Reference("H100 80GB HBM3", "resnet50", "fp32", 640, 1895.0, "Lambda, published",
              conditions="NVIDIA's DeepLearningExamples PyTorch ResNet-50, synthetic, NCHW, eager, TF32"),
    Reference("H200", "resnet50", "amp-fp16", 2560, 3090.0, "Lambda, published (about)",
              conditions="NVIDIA's DeepLearningExamples PyTorch ResNet-50, synthetic, NCHW, eager"),
    Reference("H200", "resnet50", "fp32", 640, 2270.0, "Lambda, published (about)",
              conditions="NVIDIA's DeepLearningExamples PyTorch ResNet-50, synthetic, NCHW, eager, TF32"),
    *_lambda(),
    *_nvidia_tensorflow(),
)


# MLPerf Training v4.0, NVIDIA's ResNet-50 entries per GPU (MXNet + Horovod, DALI decoding JPEGs on the GPU, NHWC,
# fused convolution + batch norm + ReLU, CUDA graphs, LARS, batch about 400): another program entirely, so never a
# match, only a ceiling the GPU check prints a ratio to.
MLPERF_RESNET50 = {"H100": 7160.0, "H200": 7950.0}


def published(gpu: str, precision: str) -> Reference | None:
    """Lambda's published ResNet-50 figure for an H100 or H200 at ``precision`` (fp32, or AMP: their fp16)."""
    return next((r for r in SHIPPED if r.source.startswith("Lambda") and r.gpu.split()[0] == gpu
                 and r.precision == precision), None)


def user_references(path: str | None = None) -> list[Reference]:
    """The user's references (``HVDBENCH_REFERENCES``), or one line saying what is wrong with the file."""
    path = path or os.environ.get(USER_ENV)
    if not path:
        return []
    try:
        rows = json.loads(Path(path).read_text())
        if not isinstance(rows, list):
            raise ValueError("not a JSON list")
        fields = {f.name for f in dataclasses.fields(Reference)}
        return [Reference(**{k: v for k, v in row.items() if k in fields}) for row in rows]
    except (OSError, ValueError, TypeError) as exc:
        raise BenchError(f"{USER_ENV}={path}: not a list of references ({exc}; fields: docs/results.md)") from None


# Words that name a smaller or other part than the full-size SXM GPU of the same name (NVML's names: "NVIDIA H100 80GB
# HBM3 MIG 1g.10gb", "NVIDIA H200 NVL", "NVIDIA H100 PCIe"): a reference matches such a GPU only if it says them.
VARIANTS = ("MIG", "NVL", "PCIe")


def _same_part(ref_gpu: str, name: str) -> bool:
    """Whether NVML's ``name`` is the GPU ``ref_gpu`` names: its words in the name, and no variant word in the
    name that the reference does not say."""
    def has(word: str, text: str) -> bool:
        return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.I) is not None
    return has(ref_gpu, name) and not any(has(v, name) and not has(v, ref_gpu) for v in VARIANTS)


def _gpu_name(result: Result) -> str | None:
    device = device_of(result)
    return device.split(" ", 1)[1] if device.startswith("cuda ") and "+" not in device else None


def _differences(ref: Reference, result: Result) -> list[str]:
    """The settings in which ``result`` is not ``ref``'s measurement (module docstring), each as "what the run's
    value (the reference's)"; empty when it matches. The GPU is not among them (:func:`_same_part`)."""
    config = result.config
    framework = mode_spec(result.mode).framework
    if ref.mode:
        theirs, mine = ref.mode, result.mode
    else:  # a published figure made with other code: any mode of its framework
        theirs, mine = ref.framework, framework
    pairs = [("GPUs", result.world_size, ref.world_size), ("mode", mine, theirs), ("model", config.model, ref.model),
             ("precision", config.precision, ref.precision), ("batch", config.batch_size, ref.batch_size),
             ("image size", config.image_size, ref.image_size),
             ("layout", "NHWC" if config.channels_last else "NCHW", "NHWC" if ref.channels_last else "NCHW"),
             ("tuning", tuning_of(config) or "eager", ref.tuning or "eager"), ("data", "synthetic", ref.data)]
    return [f"{what} {m} ({t})" for what, m, t in pairs if m != t]


def _candidates(result: Result, extra: list[Reference] | None) -> tuple[str, list[Reference]] | None:
    """(the result's GPU, the references of that GPU, the user's first) for a synthetic GPU run, else None."""
    name = _gpu_name(result)
    if name is None or source_of(result) != "synthetic" or result.config.image_size is None:
        return None
    return name, [r for r in [*(extra if extra is not None else user_references()), *SHIPPED]
                  if _same_part(r.gpu, name)]


def match(result: Result, extra: list[Reference] | None = None) -> Reference | None:
    """The first reference (the user's, this project's, the published) that matches the result (module
    docstring), or None."""
    found = _candidates(result, extra)
    return next((ref for ref in found[1] if not _differences(ref, result)), None) if found else None


def unmatched(result: Result, extra: list[Reference] | None = None) -> str | None:
    """One line for a synthetic GPU run that no reference matches: the references its GPU has, and the settings in
    which the nearest (the fewest apart; the first of those) differs, the run's value first; or that the GPU has
    none. None where one matches, and for a CPU run or a run on files (no reference is of those)."""
    found = _candidates(result, extra)
    if found is None:
        return None
    name, refs = found
    if not refs:
        return f"none of the {name}: no reference was measured on it (docs/profiles.md; {USER_ENV} adds your own)"
    why, nearest = min(((_differences(ref, result), i) for i, ref in enumerate(refs)), key=lambda a: (len(a[0]), a[1]))
    if not why:
        return None
    return (f"none matches: {len(refs)} reference(s) of the {name}; the nearest, {refs[nearest].label()}, differs in "
            f"{', '.join(why)}")


def standing(result: Result, extra: list[Reference] | None = None) -> tuple[float, Reference] | None:
    """(share of the reference, the reference) for a result that has one (module docstring), else None."""
    ref = match(result, extra)
    rate = result.summary.samples_per_sec_per_gpu
    if ref is None or not rate:
        return None
    return rate / ref.per_device, ref
