"""Mode registry: every fact about a mode lives in its ModeSpec; the rest of bench asks it.

A mode is one module that knows its framework's setup and step; nothing else. It provides::

    preflight(cfg, launch) -> RunConfig        checks and resolves the config (runs in the parent too)
    spawn(cfg) -> None                         starts the ranks when no launcher is around
    make_trainer(cfg, launch, hooks) -> Trainer   the per-rank object bench.measure.loop.measure drives
    serve(cfg, launch) -> bool                 optional: processes that serve (parameter servers) instead

Its spec says what report, verify, sweep, predict and the CLI need: the framework, the single-device
reference it is judged against, its peer with the other library (Horovod <-> the framework's own), the
``bench allreduce`` backend that carries its gradients, whether Slurm must start it with PMIx (MPI), its
strategy variants. A label names a mode and, for modes with strategies, one of them: ``tf-native:ps``.
Another package adds modes with :func:`register` (see bench.plugins).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from bench.errors import BenchError
from bench.vocabulary import FRAMEWORKS, HOROVOD_KNOBS


@dataclass(frozen=True)
class ModeSpec:
    name: str
    framework: str  # one of FRAMEWORKS
    module: str
    description: str
    library: str  # "horovod", "native" (the framework's own distribution) or "none" (one device)
    reference: str  # the framework's single-device mode: the baseline for speedups and bench verify
    peer: str | None = None  # the same framework's mode with the other library
    allreduce: Mapping[str | None, str] = field(default_factory=dict)  # strategy -> bench allreduce backend
    needs_mpi: bool = False  # under srun, the ranks join through PMIx (--mpi=pmix)
    gradient_compression: bool = False  # takes --fp16-allreduce
    strategies: tuple[str, ...] = ()  # the first is the default
    verify_np: Mapping[str | None, int | None] = field(default_factory=dict)  # strategy -> ranks (None: the mode's)
    options: tuple[str, ...] = ()  # config fields only this mode takes
    # strategy -> how gradients cross processes: "collective" (allreduce/allgather, the default for a
    # distributed mode), "ps" (pushed to parameter servers), "hybrid" (a sharded table's rows by all-to-all,
    # the rest by allreduce) or "local" (one process drives every device)
    exchange: Mapping[str | None, str] = field(default_factory=dict)
    token_embedding_only: bool = False  # trains only models with a token embedding (the text models)
    # Run settings bench verify gives this mode and its reference alike (the hybrid's table has no momentum)
    verify_settings: Mapping[str, Any] = field(default_factory=dict)
    # strategy -> why that variant does not train from --data yet (None as the key: the whole mode; absent: it does)
    no_data: Mapping[str | None, str] = field(default_factory=dict)

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)

    @property
    def distributed(self) -> bool:
        return self.library != "none"

    @property
    def horovod(self) -> bool:
        return self.library == "horovod"

    def variants(self) -> list[Variant]:
        return [Variant(self, s) for s in self.strategies] if self.strategies else [Variant(self, None)]

    def default_variant(self) -> Variant:
        return self.variants()[0]


def mode_label(mode: str, strategy: str | None) -> str:
    """How a mode and one of its strategies are written everywhere (CLI, sweeps, reports): "tf-native:ps"."""
    return f"{mode}:{strategy}" if strategy else mode


@dataclass(frozen=True)
class Variant:
    """A mode, with one of its strategies for modes that have them: what a label such as tf-native:ps names."""
    mode: ModeSpec
    strategy: str | None

    @property
    def label(self) -> str:
        return mode_label(self.mode.name, self.strategy)

    @property
    def allreduce(self) -> str | None:
        """The bench allreduce backend whose busbw prices this variant's gradient exchange (None: no allreduce)."""
        return self.mode.allreduce.get(self.strategy)

    @property
    def exchange(self) -> str:
        """How gradients cross processes (bench.measure.traffic): "collective", "ps" or "local" (no process
        boundary)."""
        return self.mode.exchange.get(self.strategy, "collective" if self.mode.distributed else "local")

    def processes(self, np_: int, num_ps: int = 1) -> int:
        """Processes a launcher starts for ``np_`` ranks: ps adds its chief (the coordinator) and parameter
        servers to the ``np_`` workers; one process drives every local device (mirrored, single-device)."""
        return {"ps": np_ + 1 + num_ps, "local": 1}.get(self.exchange, np_)

    @property
    def verify_np(self) -> str | int | None:
        """Ranks bench verify runs it with: "asked" (verify's --np), a fixed count, or None (the mode decides)."""
        return self.mode.verify_np.get(self.strategy, "asked")


MODES: dict[str, ModeSpec] = {}


def register(spec: ModeSpec) -> ModeSpec:
    if spec.framework not in FRAMEWORKS:
        raise BenchError(f"mode {spec.name}: unknown framework '{spec.framework}' "
                         f"(choose from: {', '.join(FRAMEWORKS)})")
    MODES[spec.name] = spec
    return spec


def mode(name: str) -> ModeSpec:
    try:
        return MODES[name]
    except KeyError:
        raise BenchError(f"unknown mode '{name}' (choose from: {', '.join(MODES)})") from None


def variant(label: str) -> Variant:
    """The variant a label names: 'torch-ddp', 'tf-native' (its default strategy) or 'tf-native:ps'."""
    name, _, strategy = label.partition(":")
    spec = mode(name)
    if not strategy:
        return spec.default_variant()
    if strategy not in spec.strategies:
        takes = f"its strategies are {', '.join(spec.strategies)}" if spec.strategies else "it takes no strategy"
        raise BenchError(f"'{label}': {takes}")
    return Variant(spec, strategy)


def variants(framework: str | None = None, distributed: bool | None = None) -> list[Variant]:
    """Every variant of every mode, optionally of one framework, distributed or single-device only."""
    return [v for spec in MODES.values() for v in spec.variants()
            if (framework is None or spec.framework == framework)
            and (distributed is None or spec.distributed == distributed)]


def single_of(framework: str) -> ModeSpec:
    """The framework's single-device mode."""
    return next(s for s in MODES.values() if s.framework == framework and not s.distributed)


# Horovod's knobs as run options (bench.vocabulary.HOROVOD_KNOBS)
HOROVOD_OPTIONS = tuple(HOROVOD_KNOBS)

for _spec in (
    ModeSpec("torch-ddp", "torch", "bench.modes.torch_ddp",
             "PyTorch DistributedDataParallel (NCCL on GPU, Gloo on CPU)",
             library="native", reference="torch-single", peer="torch-horovod", allreduce={None: "torch"},
             gradient_compression=True),
    ModeSpec("torch-horovod", "torch", "bench.modes.torch_horovod",
             "PyTorch with Horovod allreduce (NCCL on GPU, Gloo or MPI on CPU)",
             library="horovod", reference="torch-single", peer="torch-ddp", allreduce={None: "horovod-torch"},
             needs_mpi=True, gradient_compression=True, options=HOROVOD_OPTIONS),
    ModeSpec("tf-horovod", "tensorflow", "bench.modes.tf_horovod",
             "TensorFlow with Horovod's DistributedGradientTape (NCCL on GPU, Gloo or MPI on CPU)",
             library="horovod", reference="tf-single", peer="tf-native", allreduce={None: "horovod-tf"},
             needs_mpi=True, gradient_compression=True, options=HOROVOD_OPTIONS),
    ModeSpec("tf-native", "tensorflow", "bench.modes.tf_native",
             "TensorFlow tf.distribute: --strategy multiworker (default), mirrored or ps",
             library="native", reference="tf-single", peer="tf-horovod", allreduce={"multiworker": "tf"},
             strategies=("multiworker", "mirrored", "ps"),
             # mirrored drives every local device from one process; ps is asynchronous, so only one
             # worker has a synchronous reference.
             verify_np={"mirrored": None, "ps": 1}, options=("strategy", "num_ps"),
             exchange={"mirrored": "local", "ps": "ps"}),
    ModeSpec("torch-hybrid", "torch", "bench.modes.torch_hybrid",
             "PyTorch hybrid (TorchRec): the token embedding sharded row-wise over the ranks, its rows by all-to-all; "
             "the rest under DDP",
             library="native", reference="torch-single", allreduce={None: "torch"}, exchange={None: "hybrid"},
             token_embedding_only=True, verify_settings={"momentum": 0.0, "sparse_embeddings": True}),
    ModeSpec("torch-single", "torch", "bench.modes.torch_single",
             "PyTorch on one device, no distribution library: the single-GPU baseline",
             library="none", reference="torch-single"),
    ModeSpec("tf-single", "tensorflow", "bench.modes.tf_single",
             "TensorFlow on one device (compiled step), no strategy, no Horovod: the baseline",
             library="none", reference="tf-single"),
):
    register(_spec)
