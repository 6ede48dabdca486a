"""What a device can do, to hold model TFLOP/s against: a measured matrix-multiply rate and published peaks.

MFU (model FLOPs utilisation) = model TFLOP/s per device / a peak, with two peaks:

* **measured** (``bench peak``): the best sustained rate of a sweep of GEMM shapes on this device, at a run's
  precision, in the run's thread share on a CPU. Each shape is timed in repeats of at least ``seconds`` each;
  a shape's rate is the median of its repeats, 2 x M x N x K / time; the peak is the best shape's rate. What
  this device, driver and library reach on dense matrix products: an upper bound that the model's own
  convolutions and attention may not reach.
* **spec**: the vendor's dense (no structured sparsity) tensor rate for an exact device name and precision,
  from SPEC_TFLOPS; a name not in the table gets none, never another device's figure.

``bench peak`` writes its result (every repeat kept) to OUTPUT/peak/<host>-<device>-<precision>-<time>.json; a
run whose --output is the same directory takes the newest file for its host, device and precision and records
MFU against it (``utilisation`` in the result): bench.records.peaks reads and writes those records.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass

from bench.errors import BenchError
from bench.vocabulary import Device

# Dense TFLOP/s by exact NVML device name and precision: fp32 (CUDA cores), tf32/bf16/fp16 (tensor cores, no
# sparsity). Sources: NVIDIA's A100 datasheet (2021), H100 datasheet (2023; its tensor figures are quoted with
# sparsity: halved here), H200 datasheet (2024; the H100 SXM's rates), HGX B200 figures in NVIDIA's Blackwell
# datasheet (2024; tensor rates only: FP32 is not given for the HGX part).
_A100 = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}
_H100_SXM = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}
SPEC_TFLOPS: dict[str, dict[str, float]] = {
    "NVIDIA A100-SXM4-40GB": _A100,
    "NVIDIA A100-SXM4-80GB": _A100,
    "NVIDIA A100-PCIE-40GB": _A100,
    "NVIDIA A100 80GB PCIe": _A100,
    "NVIDIA H100 80GB HBM3": _H100_SXM,  # H100 SXM5
    "NVIDIA H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5},
    "NVIDIA H200": _H100_SXM,  # H200 SXM
    "NVIDIA B200": {"tf32": 1100.0, "bf16": 2250.0, "fp16": 2250.0},
}
SPEC_SOURCE = "vendor datasheet, dense (bench/measure/device_peak.py SPEC_TFLOPS)"
# The GEMM a run's precision computes in. On a GPU, fp32 runs use TF32 tensor-core math (bench.modes.torch_common
# allows it; TensorFlow's default), so their spec peak is the TF32 rate and `bench peak` measures with TF32 on.
PRECISION_DTYPE = {"fp32": "float32", "amp-bf16": "bfloat16", "amp-fp16": "float16"}
CPU_SHAPES = [(n, n, n) for n in (256, 512, 1024, 2048)] + [(4096, 1024, 1024), (1024, 4096, 1024)]
GPU_SHAPES = [(n, n, n) for n in (2048, 4096, 6144, 8192, 12288, 16384)] + [(16384, 4096, 4096),
                                                                             (4096, 16384, 4096)]


def torch_device(torch, device):
    """--device for a GEMM load (bench peak, bench soak): auto is cuda where PyTorch sees a GPU, else cpu; cuda
    where it sees none is one line."""
    if device == Device.auto:
        return Device.cuda if torch.cuda.is_available() else Device.cpu
    if device == Device.cuda and not torch.cuda.is_available():
        raise BenchError("--device cuda: PyTorch sees no GPU here (use --device cpu)")
    return device


def spec_precision(precision: str) -> str:
    return {"fp32": "tf32", "amp-bf16": "bf16", "amp-fp16": "fp16"}[precision]


def spec_peak(name: str | None, precision: str) -> tuple[float | None, str]:
    """(the spec's dense TFLOP/s for a GPU name, where it comes from or why there is none)."""
    key = spec_precision(precision)
    if not name:
        return None, "no GPU name (NVML did not answer, or a CPU run): no spec peak"
    known = SPEC_TFLOPS.get(name)
    if known is None:
        return None, f"{name!r} is not in the table of published peaks: no spec peak"
    if key not in known:
        return None, f"the published figures for {name} give no {key} rate: no spec peak"
    return known[key], f"{name}, {key}: {SPEC_SOURCE}"


def device_slug(device: str) -> str:
    """A file-name form of a device label: 'cpu (2 threads)' -> 'cpu-2t', 'cuda:0 NVIDIA H100 ...' -> model."""
    m = re.match(r"cpu \((\d+) threads", device)
    if m:
        return f"cpu-{m.group(1)}t"
    name = re.sub(r"^cuda:\d+ ", "", device)
    return re.sub(r"[^A-Za-z0-9.]+", "-", name).strip("-").lower() or "device"


@dataclass(frozen=True)
class Sweep:
    """One GEMM sweep's rates: every repeat's TFLOP/s per shape (M, N, K), and where and how it ran."""
    host: str
    device: str  # the framework's label: "cpu (2 threads)", "cuda:0 NVIDIA H100 80GB HBM3"
    precision: str
    dtype: str
    torch: str
    seconds_per_repeat: float
    repeats: int
    rates: dict[tuple[int, int, int], list[float]]


def _gemm_rate(torch, dev, dtype, m: int, n: int, k: int, seconds: float, repeats: int) -> list[float]:
    a = torch.randn(m, k, device=dev, dtype=dtype)
    b = torch.randn(k, n, device=dev, dtype=dtype)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(2):  # warm-up: the library picks its kernel
        torch.matmul(a, b)
    sync()
    start = time.perf_counter()
    torch.matmul(a, b)
    sync()
    per_call = max(time.perf_counter() - start, 1e-6)
    calls = max(1, int(seconds / per_call))
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            torch.matmul(a, b)
        sync()
        rates.append(2 * m * n * k * calls / (time.perf_counter() - start) / 1e12)
    return rates


def measure(device: str, precision: str, threads: int | None = None, seconds: float = 0.5, repeats: int = 3,
            shapes: list[tuple[int, int, int]] | None = None) -> Sweep:
    """The GEMM sweep (module docstring) on ``device`` (cpu or cuda); every repeat's rate kept (bench.records.peaks
    makes the record of it)."""
    import torch

    dev = torch.device("cuda:0" if device == "cuda" else "cpu")
    if dev.type == "cpu" and threads:
        torch.set_num_threads(threads)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # as fp32 runs do
    dtype = getattr(torch, PRECISION_DTYPE[precision])
    label = (f"cuda:0 {torch.cuda.get_device_name(0)}" if dev.type == "cuda"
             else f"cpu ({torch.get_num_threads()} threads)")
    rates = {(m, n, k): _gemm_rate(torch, dev, dtype, m, n, k, seconds, repeats)
             for m, n, k in shapes or (GPU_SHAPES if dev.type == "cuda" else CPU_SHAPES)}
    return Sweep(host=socket.gethostname(), device=label, precision=precision, dtype=PRECISION_DTYPE[precision],
                 torch=torch.__version__, seconds_per_repeat=seconds, repeats=repeats, rates=rates)
