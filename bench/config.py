"""Run configuration: validated, frozen data; the resolved form is saved with every result."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from bench.errors import BenchError


class Precision(str, Enum):
    fp32 = "fp32"
    amp_fp16 = "amp-fp16"
    amp_bf16 = "amp-bf16"


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


@dataclass(frozen=True)
class Profile:
    """Defaults that depend on the device the run lands on."""

    name: str
    batch_size: int
    image_size: int | None  # None: the model's own default (224, 299 for Inception V3)
    seq_len: int | None  # text models; None: the model's own default
    warmup_steps: int
    steps_per_window: int
    windows: int


# GPU defaults follow the Horovod paper and its synthetic benchmark script:
# batch 64 per GPU, 224x224, 10 warmup steps, 10 windows ("iterations") of 10 steps.
GPU_PROFILE = Profile("gpu-paper", batch_size=64, image_size=None, seq_len=None, warmup_steps=10,
                      steps_per_window=10, windows=10)
# CPU defaults: a short, honest run that fits about two minutes on a 2-core machine.
CPU_PROFILE = Profile("cpu-quick", batch_size=8, image_size=64, seq_len=32, warmup_steps=2, steps_per_window=4,
                      windows=5)

# Config fields that only some modes take (their ModeSpec.options lists them).
MODE_OPTIONS = ("strategy", "num_ps")

LEARNING_RATE = 0.01
MOMENTUM = 0.9


@dataclass(frozen=True)
class RunConfig:
    """What the user asked for. Fields left as None are filled by :meth:`resolve`."""

    mode: str
    model: str = "vgg16"
    batch_size: int | None = None
    image_size: int | None = None  # image models
    seq_len: int | None = None  # text models: tokens per sequence
    num_classes: int | None = None  # classifier outputs, or a text model's vocabulary; default: the model's
    precision: Precision = Precision.fp32
    channels_last: bool = False
    warmup_steps: int | None = None
    steps_per_window: int | None = None
    windows: int | None = None
    duration: float | None = None
    np: int | None = None
    device: Device = Device.auto
    seed: int = 42
    output: str = "results"
    fp16_allreduce: bool = False
    # Text models: an untied output projection and a sparse embedding gradient (only the rows looked up);
    # sparse_as_dense reduces that gradient as a dense one (Horovod's option; the native modes densify it).
    sparse_embeddings: bool = False
    sparse_as_dense: bool = False
    rendezvous_timeout: float = 120.0
    strategy: str | None = None  # modes with strategies (tf-native); default: the mode's first
    num_ps: int | None = None  # tf-native --strategy ps only (default 1)
    telemetry: bool = True
    telemetry_interval: float = 0.5
    stall_timeout: float | None = None  # None: derived from the first step (bench.watchdog.auto_bound)
    # Filled by resolve():
    profile: str | None = None
    learning_rate: float = LEARNING_RATE
    momentum: float = MOMENTUM
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from bench.models import model
        from bench.modes import mode, variant

        spec = mode(self.mode)
        model_spec = model(self.model)
        try:
            object.__setattr__(self, "precision", Precision(self.precision))
            object.__setattr__(self, "device", Device(self.device))
        except ValueError as exc:
            raise BenchError(str(exc)) from None
        for name in MODE_OPTIONS:
            if getattr(self, name) is not None and name not in spec.options:
                raise BenchError(f"--{name.replace('_', '-')} does not apply to {self.mode}")
        if self.strategy is not None:
            variant(f"{self.mode}:{self.strategy}")
        for name in ("batch_size", "warmup_steps", "steps_per_window", "windows", "np", "num_classes", "num_ps",
                     "seq_len"):
            value = getattr(self, name)
            minimum = 0 if name == "warmup_steps" else 1
            if value is not None and (not isinstance(value, int) or value < minimum):
                raise BenchError(f"--{name.replace('_', '-')} must be an integer >= {minimum} (got {value})")
        if self.duration is not None and not self.duration > 0:
            raise BenchError(f"--duration must be > 0 seconds (got {self.duration})")
        if not self.telemetry_interval > 0:
            raise BenchError(f"--telemetry-interval must be > 0 seconds (got {self.telemetry_interval})")
        if not self.rendezvous_timeout > 0:
            raise BenchError(f"--rendezvous-timeout must be > 0 seconds (got {self.rendezvous_timeout})")
        if self.stall_timeout is not None and not self.stall_timeout > 0:
            raise BenchError(f"--stall-timeout must be > 0 seconds (got {self.stall_timeout})")
        if self.sparse_embeddings and not model_spec.sparse_embeddings:
            raise BenchError(f"--sparse-embeddings applies to models with a token embedding (transformer-*); "
                             f"{self.model} has none")
        if self.sparse_as_dense and not self.sparse_embeddings:
            raise BenchError("--sparse-as-dense needs --sparse-embeddings (without it the gradient is dense already)")
        if not self.is_resolved:
            model_spec.workload.check(model_spec, self)

    @property
    def embedding(self) -> str:
        """The text model's embedding as its builders take it: 'tied' (the paper) or 'sparse' (untied)."""
        return "sparse" if self.sparse_embeddings else "tied"

    @property
    def is_resolved(self) -> bool:
        return self.profile is not None

    def resolve(self, device: str, np: int) -> RunConfig:
        """Fill defaults for the device the run lands on ('cpu' or 'cuda') and the world size."""
        from bench.models import model
        from bench.modes import mode

        spec = model(self.model)
        profile = GPU_PROFILE if device == "cuda" else CPU_PROFILE
        return dataclasses.replace(
            self,
            device=Device(device),
            np=np,
            batch_size=self.batch_size or profile.batch_size,
            num_classes=self.num_classes or spec.default_classes,
            **spec.workload.resolve(spec, self, profile),
            warmup_steps=profile.warmup_steps if self.warmup_steps is None else self.warmup_steps,
            steps_per_window=self.steps_per_window or profile.steps_per_window,
            windows=self.windows or profile.windows,
            profile=profile.name,
            strategy=self.strategy or mode(self.mode).default_variant().strategy,
        )

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["precision"] = self.precision.value
        data["device"] = self.device.value
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise BenchError(f"unknown config keys: {', '.join(sorted(unknown))}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BenchError(f"config is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise BenchError("config JSON must be an object")
        return cls.from_dict(data)
