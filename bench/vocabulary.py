"""The small vocabularies every layer shares: the frameworks, the devices and the precisions a run takes.

A leaf: it imports nothing of bench, so the modes and the distributed layer use these names without importing
the run configuration (which imports the mode and model registries to check a run).
"""

from __future__ import annotations

from enum import Enum

FRAMEWORKS = ("torch", "tensorflow")
# Horovod's knobs that the MLPerf entries set, as run options (bench.config): option -> (its environment variable,
# Horovod 0.28's default; 1 ms and 128 MiB since 0.21, one NCCL stream). hvd.init() reads the variables
# (bench.distributed.hvdist); a cell's key names the values that differ from these (bench.records.describe).
HOROVOD_KNOBS = {"fusion_threshold": ("HOROVOD_FUSION_THRESHOLD", 128 * 1024**2),
                 "cycle_time": ("HOROVOD_CYCLE_TIME", 1.0),
                 "nccl_streams": ("HOROVOD_NUM_NCCL_STREAMS", 1)}
FRAMEWORK_NAMES = {"torch": "PyTorch", "tensorflow": "TensorFlow"}  # as messages name them


class Precision(str, Enum):
    fp32 = "fp32"
    amp_fp16 = "amp-fp16"
    amp_bf16 = "amp-bf16"


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"
