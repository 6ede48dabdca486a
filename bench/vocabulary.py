"""The small vocabularies every layer shares: the frameworks, the devices and the precisions a run takes.

A leaf: it imports nothing of bench, so the modes and the distributed layer use these names without importing
the run configuration (which imports the mode and model registries to check a run).
"""

from __future__ import annotations

from enum import Enum

FRAMEWORKS = ("torch", "tensorflow")
FRAMEWORK_NAMES = {"torch": "PyTorch", "tensorflow": "TensorFlow"}  # as messages name them


class Precision(str, Enum):
    fp32 = "fp32"
    amp_fp16 = "amp-fp16"
    amp_bf16 = "amp-bf16"


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"
