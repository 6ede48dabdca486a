"""Published Horovod scaling figures and the inputs `bench predict --published` assumes for them.

Figures (synthetic ImageNet-shaped data, TensorFlow tf_cnn_benchmarks, batch 64 per GPU, Pascal GPUs,
servers of 4 GPUs on a RoCE-capable 25 Gbit/s network):

* 128 GPUs (32 servers): Horovod's README, 2018: "90% scaling efficiency for both Inception V3 and
  ResNet-101, and 79% scaling efficiency for VGG-16".
* 512 GPUs (128 servers): Horovod's README and docs/benchmarks.rst: "90% ... Inception V3 and
  ResNet-101, and 68% scaling efficiency for VGG-16".
* 16 GPUs (4 servers): the example output in docs/benchmarks.rst, ResNet-101, "total images/sec:
  1656.82"; its efficiency is computed here against the assumed 1-GPU rate below, so it inherits
  that assumption's error.

Assumed inputs (not published with the figures; written down so the check can be repeated):

* 1-GPU rates: TensorFlow's benchmark page (tensorflow.org/performance/benchmarks, DGX-1 P100,
  synthetic, batch 64, May 2017): Inception V3 142 img/s, VGG-16 154 img/s. ResNet-101 is not on
  that page: its step time is interpolated by forward FLOPs (He et al. 2016: 3.8, 7.6 and 11.3
  GFLOPs for ResNet-50/101/152) between ResNet-50 (219 img/s) and ResNet-152 (91.8 img/s).
* Bus bandwidth 2.8 GB/s: 90% of the 25 Gbit/s (3.125 GB/s) line rate, one NIC per 4-GPU server,
  so a ring through all GPUs is bounded by the NIC.
* Latency 10 us per ring step; Horovod's 64 MiB fusion buffer; overlap 0.5 (half the allreduce
  hidden under the backward pass).
* Gradient sizes are this suite's models (Inception V3 with its auxiliary head).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepTime:
    """An assumed 1-GPU rate."""
    batch_size: int
    images_per_sec: float
    source: str

    @property
    def step_time_s(self) -> float:
        return self.batch_size / self.images_per_sec


@dataclass(frozen=True)
class Network:
    """The assumed network and overlap."""
    busbw_GBps: float
    latency_s: float
    overlap: float
    fusion_bytes: int


@dataclass(frozen=True)
class Figure:
    """A published scaling efficiency."""
    model: str
    gpus: int
    efficiency: float
    source: str


_T50, _T152 = 64 / 219, 64 / 91.8  # seconds per step of 64 images
_T101 = _T50 + (7.6 - 3.8) / (11.3 - 3.8) * (_T152 - _T50)

STEP_TIMES = {
    "inception3": StepTime(64, 142.0, "tensorflow.org benchmarks, DGX-1 P100"),
    "vgg16": StepTime(64, 154.0, "tensorflow.org benchmarks, DGX-1 P100"),
    "resnet101": StepTime(64, 64 / _T101, "interpolated by FLOPs between ResNet-50 and ResNet-152 on the same page"),
}

NETWORK = Network(busbw_GBps=2.8, latency_s=10e-6, overlap=0.5, fusion_bytes=64 * 1024**2)

_README = "Horovod README (32 servers x 4 Pascal GPUs, 25 Gbit/s RoCE)"
_DOCS = "Horovod README and docs/benchmarks.rst (128 servers x 4 Pascal GPUs, 25 Gbit/s RoCE)"
FIGURES = [
    Figure("resnet101", 16, 1656.82 / (16 * STEP_TIMES["resnet101"].images_per_sec),
           "docs/benchmarks.rst example output, 1656.82 img/s on 16 GPUs (efficiency vs the assumed 1-GPU rate)"),
    Figure("inception3", 128, 0.90, _README),
    Figure("resnet101", 128, 0.90, _README),
    Figure("vgg16", 128, 0.79, _README),
    Figure("inception3", 512, 0.90, _DOCS),
    Figure("resnet101", 512, 0.90, _DOCS),
    Figure("vgg16", 512, 0.68, _DOCS),
]
