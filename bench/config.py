"""Run configuration: validated, frozen data; the resolved form is saved with every result."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from bench.data import formats
from bench.data.datasets import class_count, rank_samples
from bench.data.datasets import load as load_dataset
from bench.data.loaders import default_loader, loader
from bench.errors import BenchError
from bench.measure import goal
from bench.measure.attribution import default_steps
from bench.models import model
from bench.modes import mode, variant
from bench.vocabulary import Device, Precision


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
# --tuned: the hardware driven the way the field drives it (docs/profiles.md): the paper's lengths,
# a batch that fills a GPU (Lambda's and MLPerf's per-GPU batches are 256-1280; the bound is 256), and,
# on the model, TUNED_SETTINGS. Precision stays --precision's: it changes the arithmetic, so both profiles take it
# from the user and a comparison of paper and tuned is made at one precision.
GPU_TUNED_PROFILE = dataclasses.replace(GPU_PROFILE, name="gpu-tuned", batch_size=256)
CPU_TUNED_PROFILE = dataclasses.replace(CPU_PROFILE, name="cpu-tuned")
PROFILES = {(False, "cuda"): GPU_PROFILE, (False, "cpu"): CPU_PROFILE,
            (True, "cuda"): GPU_TUNED_PROFILE, (True, "cpu"): CPU_TUNED_PROFILE}
# What --tuned sets where the user left it unset, per framework: the compiler's default mode, NHWC for the image
# models (PyTorch; TensorFlow is always NHWC) and the fused optimizer (PyTorch); XLA (TensorFlow). PAPER_SETTINGS:
# the same fields as the paper's profile has them (eager, NCHW, the plain optimizer, no XLA). --tuned sets XLA on a
# GPU only (RunConfig.tuning).
TUNED_SETTINGS = {"torch": dict(compile="default", channels_last=True, fused_optimizer=True),
                  "tensorflow": dict(xla=True)}
PAPER_SETTINGS = {"torch": dict(compile="none", channels_last=False, fused_optimizer=False),
                  "tensorflow": dict(xla=False)}
# Why tf-native's parameter servers take no --xla (seen: "Trying to access resource ... located in device /job:ps").
NO_XLA_ON_PS = ("XLA compiles a step on the device that holds its variables, and under --strategy ps the parameter "
                "servers hold them: use --strategy multiworker or drop --xla")
# torch.compile's modes (--compile): none is eager, the paper's.
COMPILE_MODES = ("none", "default", "max-autotune", "reduce-overhead")

# Config fields that only some modes take (their ModeSpec.options lists them).
MODE_OPTIONS = ("strategy", "num_ps", "fusion_threshold", "cycle_time", "nccl_streams")
# Config fields that one framework's modes take and the other's refuse.
FRAMEWORK_OPTIONS = {"compile": "torch", "fused_optimizer": "torch", "channels_last": "torch", "xla": "tensorflow"}


def takes(mode_name: str, name: str) -> bool:
    """Whether a mode takes the run option ``name``: one of MODE_OPTIONS its spec lists, one of its framework's
    FRAMEWORK_OPTIONS, or any other option (every mode takes those)."""
    spec = mode(mode_name)
    if name in MODE_OPTIONS:
        return name in spec.options
    return FRAMEWORK_OPTIONS.get(name, spec.framework) == spec.framework


LEARNING_RATE = 0.01
MOMENTUM = 0.9


@dataclass(frozen=True)
class Option:
    """How a run option shows on the command line and how it is checked: declared once, beside its field, and
    read by the mode commands, the sweep (``sweep``: passed to every cell), the JSON run file and the checks."""
    help: str

    flag: str | None = None  # the typer declaration when it is not --name (booleans: "--x" or "--x/--no-x")
    minimum: int | None = None  # integers: the smallest value allowed
    positive: bool = False  # numbers: must be > 0
    unit: str = ""  # said after the bound in the error line ("seconds")
    sweep: bool = False  # `bench sweep` takes it and passes it to every cell
    parse: Callable[[str], Any] | None = None  # the command line's text -> the field's value (a list, a size)
    shown: str | None = None  # with parse: the default as the command line writes it ("4K", "a,b")
    argument: bool = False  # a positional argument (bench data make PATH), not a --flag
    # Other spellings the command line takes, unlisted in --help (its help text names them): Horovod's script's,
    # horovodrun's -np, an old name (bench.cli.spelled puts them in the form the parser reads)
    aliases: tuple[str, ...] = ()

    def primary(self, name: str) -> str:
        """The flag the option of field ``name`` is listed under (the first of a --x/--no-x pair)."""
        return (self.flag or f"--{name.replace('_', '-')}").split("/")[0]


def option(default: Any, help: str, **how: Any) -> Any:
    """A field of a command's configuration (RunConfig, and every other command's) that is also a command-line
    option of that command (see :class:`Option`): the one place it is declared."""
    return field(default=default, metadata={"option": Option(help, **how)})


def declared(cls: type) -> list[tuple[str, Any, Any, Option]]:
    """(name, type, default, declaration) of every option a configuration dataclass declares, in field order:
    what a command's flags are built from (bench.cli.command_parameters)."""
    hints = typing.get_type_hints(cls)
    return [(f.name, hints[f.name], f.default, f.metadata["option"]) for f in dataclasses.fields(cls)
            if "option" in f.metadata]


def comma_list(text: str) -> tuple[str, ...]:
    """A comma-separated list on the command line: 'a, b,' -> ('a', 'b')."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def int_list(text: str) -> tuple[int, ...]:
    """A comma-separated list of integers on the command line: '1, 2' -> (1, 2)."""
    try:
        return tuple(int(x) for x in comma_list(text))
    except ValueError:
        raise BenchError(f"cannot read '{text}' as a comma-separated list of integers") from None


_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2, "MIB": 1024**2,
          "G": 1024**3, "GB": 1024**3, "GIB": 1024**3}


def byte_size(text: str) -> int:
    """'4K' -> 4096, '256M' -> 268435456, '553430176' -> 553430176 (binary units, as nccl-tests' -b/-e)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _UNITS:
        raise BenchError(f"cannot read '{text}' as a size (examples: 4096, 4K, 256M, 1G)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


@dataclass(frozen=True)
class PluginOption:
    """A run option a plugin adds (:func:`register_option`); its value travels in RunConfig.extra."""
    name: str
    type: Any
    default: Any
    option: Option


PLUGIN_OPTIONS: dict[str, PluginOption] = {}


def register_option(name: str, type_: Any, default: Any, help: str, **how: Any) -> PluginOption:
    """Add a run option from a plugin: every mode command shows it (``--name``), ``bench sweep`` passes it
    to every cell when ``sweep=True``, and the run's config (and so its result) keeps it in ``extra``."""
    if name in {f.name for f in dataclasses.fields(RunConfig)} or name in PLUGIN_OPTIONS:
        raise BenchError(f"run option '{name}' is already declared")
    PLUGIN_OPTIONS[name] = PluginOption(name, type_, default, Option(help, **how))
    return PLUGIN_OPTIONS[name]


def check_option(name: str, value: Any, how: Option) -> None:
    """The checks an option's declaration names, with the one line a user sees."""
    flag = f"--{name.replace('_', '-')}"
    if value is None:
        return
    if how.minimum is not None and (not isinstance(value, int) or isinstance(value, bool) or value < how.minimum):
        raise BenchError(f"{flag} must be an integer >= {how.minimum} (got {value})")
    if how.positive and not value > 0:
        raise BenchError(f"{flag} must be > 0{' ' + how.unit if how.unit else ''} (got {value})")


def check_declared(config: Any) -> None:
    """Every declared option of a command's configuration (:func:`declared`) checked as its declaration says."""
    for name, _, _, how in declared(type(config)):
        check_option(name, getattr(config, name), how)


@dataclass(frozen=True)
class RunConfig:
    """What the user asked for. Fields left as None are filled by :meth:`resolve`. Each field declared with
    :func:`option` is a command-line option of every mode command, with the help and checks given here."""
    mode: str
    model: str = option("vgg16", "Model to train (bench models lists them).")

    batch_size: int | None = option(None, "Samples per device per step (default: 64 on GPU, 8 on CPU).", minimum=1)
    image_size: int | None = option(None, "Image models: square image side (default: the model's own (224; 299 "
                                    "for inception3) on GPU, 64 on CPU).", minimum=1, sweep=True)
    seq_len: int | None = option(None, "Text models: tokens per sequence (default: the model's own on GPU, 32 on "
                                 "CPU).", minimum=1, sweep=True)
    num_classes: int | None = option(None, "Classifier outputs (10 = CIFAR-10 shape), or a text model's vocabulary "
                                     "(default: the model's: 1000 classes, 37000 tokens for transformer-base).",
                                     minimum=1, sweep=True)
    precision: Precision = option(Precision.fp32, "fp32 (TF32 on GPU) or autocast mixed precision.")
    channels_last: bool | None = option(None, "NHWC memory format (PyTorch image models; TensorFlow is always NHWC; "
                                        "default: off, on with --tuned).",
                                        flag="--channels-last/--nchw", sweep=True)
    tuned: bool = option(False, "The profile: --paper (the Horovod paper's settings: batch 64 per GPU, eager, the "
                         "plain optimizer) or --tuned (batch 256 per GPU, --compile default, channels-last and "
                         "--fused-optimizer for PyTorch, --xla for TensorFlow on a GPU; what you set yourself wins). "
                         "docs/profiles.md says when to use which.", flag="--tuned/--paper", sweep=True)
    compile: str | None = option(None, "PyTorch modes: torch.compile the model: none (eager), default, max-autotune "
                                 "or reduce-overhead (CUDA graphs); --compile alone is --compile default; compiled in "
                                 "the first step, reported as compile_s and never inside a timed window (default: "
                                 "none, default with --tuned).",
                                 sweep=True)
    fused_optimizer: bool | None = option(None, "PyTorch modes: the optimizer's fused kernel (SGD(fused=True), "
                                          "Adagrad's on the CPU; default: off, on with --tuned).",
                                          flag="--fused-optimizer/--unfused", sweep=True)
    xla: bool | None = option(None, "TensorFlow modes: compile each step's forward and backward pass with XLA "
                              "(tf.function(jit_compile=True)); the exchange and the update stay TensorFlow's. "
                              "Compiled in the first step, reported as compile_s and never inside a timed window "
                              "(default: off, on with --tuned on a GPU).", flag="--xla/--no-xla", sweep=True)
    warmup_steps: int | None = option(None, "Warm-up steps after the first: each timed and reported apart, kept out "
                                      "of the headline (Horovod's script: --num-warmup-batches; default: 10 GPU, "
                                      "2 CPU).", aliases=("--num-warmup-batches",), minimum=0, sweep=True)
    steps_per_window: int | None = option(None, "Steps in one timed window, between two device syncs (Horovod's "
                                          "script: --num-batches-per-iter; default: 10 GPU, 4 CPU).",
                                          aliases=("--num-batches-per-iter",), minimum=1, sweep=True)
    windows: int | None = option(None, "Timed windows, each one throughput sample (Horovod's script: --num-iters; "
                                 "default: 10 GPU, 5 CPU).", aliases=("--num-iters",), minimum=1, sweep=True)
    duration: float | None = option(None, "Run windows for this many seconds instead of --windows (with --epochs: "
                                    "stop after the epoch that ends past this many seconds of training).",
                                    positive=True,
                                    unit="seconds")
    attribution_steps: int | None = option(None, "Per-rank attribution: compute-only and exchange-only steps each, "
                                           "after the timed ones (default: 1 per 20 timed steps, at least 2; 0: "
                                           "none).", minimum=0, sweep=True)
    trace: int | None = option(None, "Profile this many steps with the framework's profiler (torch.profiler, "
                               "TensorFlow's; Horovod's timeline too), after the timed windows: one file per rank "
                               "in <output>/<run id>.trace/, and the tracing's cost per step in the result "
                               "(docs/measuring.md).", minimum=1, unit="steps")
    np: int | None = option(None, "Ranks to spawn when no launcher is around (default: every GPU, else 2; -np as "
                            "horovodrun and mpirun spell it).", flag="--np", aliases=("-np",), minimum=1)
    device: Device = option(Device.auto, "Where to train.", sweep=True)
    seed: int = option(42, "Seed for weights, synthetic data, and --data's shuffle and crops.")
    data: str | None = option(None, "Train from the dataset in this folder (ImageNet folder, TFRecord shards or "
                              "CIFAR-10; bench data make writes one; docs/data.md) instead of one synthetic batch.",
                              sweep=True)
    loader: str | None = option(None, "--data's input pipeline: torch (DataLoader) for the PyTorch modes, tf "
                                "(tf.data) for the TensorFlow ones (default: the mode's framework's).", sweep=True)
    loader_workers: int | None = option(None, "--data: loader workers per rank (processes for torch, tf.data "
                                        "threads for tf; default: the rank's share of the node's cores).",
                                        minimum=0, sweep=True)
    # Training to a goal (bench.measure.goal; docs/training.md): epochs as windows, evaluations, the schedule.
    epochs: int | None = option(None, "--data: train this many epochs (each timed window is one epoch of the rank's "
                                "shard), evaluating on the held-out split; with --target-accuracy, at most this "
                                "many.", minimum=1, sweep=True)
    target_accuracy: float | None = option(None, "--epochs: stop at the first evaluation whose top-1 accuracy on "
                                           "the held-out split is at least this (0 < A <= 1).", sweep=True)
    eval_every: int | None = option(None, "--epochs: evaluate every N epochs, and after the last (default 1).",
                                    minimum=1, sweep=True)
    stop_at_target: bool = option(True, "--target-accuracy: stop at the first evaluation at the target, or "
                                  "(--all-epochs) train every epoch and record when it was reached, as bench "
                                  "converge does to compare final accuracies at one epoch.",
                                  flag="--stop-at-target/--all-epochs",
                                  sweep=True)
    base_lr: float | None = option(None, "--epochs: the learning rate for a global batch of 256 (default 0.1).",
                                   positive=True, sweep=True)
    lr_scaling: str = option("linear", "--epochs: linear (the rate is base-lr x global batch / 256, Goyal et al.) "
                             "or none (base-lr as it is).", sweep=True)
    warmup_epochs: float | None = option(None, "--epochs: epochs of linear warmup to the scaled rate (default: "
                                         "with --lr-scaling linear, one per doubling of the global batch past "
                                         "256, at most 5 and a quarter of --epochs; else 0).", sweep=True)
    lr_decay: str = option("cosine", "--epochs: after the warmup, cosine (to zero at the last epoch), step "
                           "(x0.1 at 50% and 75% of the epochs) or none.", sweep=True)
    optimizer: str = option("sgd", "--epochs: sgd (momentum 0.9, the image models' recipe) or adagrad "
                            "(per-parameter rates, eps 1e-8: what trains the text models here, and what TorchRec's "
                            "fused table runs on a CPU too).", sweep=True)
    weight_decay: float | None = option(None, "--epochs: L2 weight decay added to the gradient (default 1e-4; 0 "
                                        "without --epochs).", sweep=True)
    label_smoothing: float = option(0.0, "--epochs: label smoothing of the training loss (0 <= e < 1).",
                                    sweep=True)
    checkpoint_every: int | None = option(None, "--epochs: write a checkpoint after every N-th epoch's evaluation "
                                          "(N a multiple of --eval-every), to --checkpoint-dir.", minimum=1)
    checkpoint_dir: str | None = option(None, "--checkpoint-every: the checkpoint's folder (default: "
                                        "<output>/checkpoints/<mode>-np<N>-<configuration's key>; one checkpoint, "
                                        "replaced whole).")
    resume_from: str | None = option(None, "--epochs: continue the run whose checkpoint is in this folder (the same "
                                "configuration; docs/training.md).")
    output: str = option("results", "Directory for result JSON files and results.csv.")
    mlflow: str | None = option(None, "Also log the result to this MLflow tracking server (its URI: "
                                      "http://host:5000, sqlite:///mlflow.db) as a run: settings, figures, "
                                      "environment, files (docs/history.md).")
    mlflow_experiment: str = option("hvdbench", "--mlflow: the experiment the run goes in (made where missing).")
    fp16_allreduce: bool = option(False, "Compress gradients to fp16 for the allreduce.", flag="--fp16-allreduce")
    # Text models: an untied output projection and a sparse embedding gradient (only the rows looked up);
    # sparse_as_dense reduces that gradient as a dense one (Horovod's option; the native modes densify it).
    sparse_embeddings: bool = option(False, "Text models: an untied output projection and a sparse embedding "
                                     "gradient (the rows looked up: allgathered, or pushed to the parameter server).",
                                     flag="--sparse-embeddings", sweep=True)
    sparse_as_dense: bool = option(False, "With --sparse-embeddings: reduce the embedding gradient as a dense "
                                   "tensor (Horovod's option).", flag="--sparse-as-dense", sweep=True)
    rendezvous_timeout: float = option(120.0, "Seconds to wait for all ranks to meet.", positive=True, unit="seconds")
    strategy: str | None = option(None, "Modes with strategies (tf-native: multiworker, mirrored, ps; default the "
                                  "first).")
    num_ps: int | None = option(None, "tf-native --strategy ps: parameter servers (default: 1).", flag="--num-ps",
                                minimum=1)
    # Horovod's knobs (the Horovod modes; bench.distributed.hvdist): every Horovod result records their values.
    fusion_threshold: int | None = option(None, "Horovod modes: tensor fusion buffer, bytes (4K, 64M; 0 turns fusion "
                                          "off; default: Horovod's, 128M, or HOROVOD_FUSION_THRESHOLD).",
                                          parse=byte_size, sweep=True)
    cycle_time: float | None = option(None, "Horovod modes: milliseconds between its background thread's cycles "
                                      "(default: Horovod's, 1, or HOROVOD_CYCLE_TIME).", positive=True, unit="ms",
                                      sweep=True)
    nccl_streams: int | None = option(None, "Horovod modes on GPUs: NCCL streams (default: Horovod's, 1, or "
                                      "HOROVOD_NUM_NCCL_STREAMS).", minimum=1, sweep=True)
    telemetry: bool = option(True, "Sample GPU telemetry through NVML on each node.",
                             flag="--telemetry/--no-telemetry")
    telemetry_interval: float = option(0.5, "Seconds between telemetry samples.", positive=True, unit="seconds")
    stall_timeout: float | None = option(None, "End the job when no step completes for this many seconds "
                                         "(default: max(120, 20 x first step x steps per window)).", positive=True,
                                         unit="seconds")
    # Filled by resolve():
    profile: str | None = None
    learning_rate: float = LEARNING_RATE
    momentum: float = MOMENTUM
    extra: dict[str, Any] = field(default_factory=dict)  # the plugins' options (register_option), by name

    def __post_init__(self) -> None:
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
        for name, how in cli_options().items():  # an option the command line writes as text: its value
            if how.parse is not None and name not in PLUGIN_OPTIONS and isinstance(getattr(self, name), str):
                object.__setattr__(self, name, how.parse(getattr(self, name)))
        for name, how in cli_options().items():
            check_option(name, self.extra.get(name) if name in PLUGIN_OPTIONS else getattr(self, name), how)
        unknown = set(self.extra) - set(PLUGIN_OPTIONS)
        if unknown:
            raise BenchError(f"unknown run option(s) in extra: {', '.join(sorted(unknown))}")
        model_spec.check_embedding(self.sparse_embeddings, self.sparse_as_dense)
        self._check_tuning(spec, model_spec)
        if self.channels_last and spec.framework != "torch":
            raise BenchError(f"--channels-last applies to the PyTorch modes; {self.mode} is TensorFlow, whose "
                             "images are always NHWC")
        if self.channels_last and model_spec.workload.kind != "image":
            raise BenchError(f"--channels-last applies to image models; {self.model} trains on "
                             f"{model_spec.workload.units}")
        if not self.is_resolved:
            model_spec.workload.check(model_spec, self)
        self._check_data(spec, model_spec)
        self._check_goal()

    def _check_tuning(self, spec, model_spec) -> None:
        """--compile and --fused-optimizer: PyTorch's, one line for a TensorFlow mode; --xla: TensorFlow's."""
        if self.compile is not None and self.compile not in COMPILE_MODES:
            raise BenchError(f"--compile takes {', '.join(COMPILE_MODES)} (got '{self.compile}')")
        if self.compile not in (None, "none") and spec.framework != "torch":
            raise BenchError(f"--compile applies to the PyTorch modes; {self.mode} is TensorFlow (its compiler: "
                             "--xla)")
        if self.fused_optimizer and spec.framework != "torch":
            raise BenchError(f"--fused-optimizer applies to the PyTorch modes; {self.mode} is TensorFlow")
        if self.xla and spec.framework != "tensorflow":
            raise BenchError(f"--xla applies to the TensorFlow modes; {self.mode} is PyTorch (its compiler: "
                             "--compile)")
        if self.trace and self.strategy == "ps":
            raise BenchError("--trace: tf-native's ps strategy runs its steps in the worker processes, which its "
                             "coordinator only dispatches to; trace the multiworker or mirrored strategy")
        if self.xla and self.strategy == "ps":
            raise BenchError(f"--xla: {NO_XLA_ON_PS}")
        if self.xla and self.sparse_embeddings and not self.sparse_as_dense:
            raise BenchError("--xla makes the embedding's gradient dense inside the compiled pass: with "
                             "--sparse-embeddings add --sparse-as-dense, or drop --xla")

    def _no_fused_optimizer(self, device: str) -> str | None:
        """Why torch has no fused kernel for this run's optimizer, or None."""
        if self.sparse_embeddings and not self.sparse_as_dense:
            return "torch's fused kernels take dense gradients; --sparse-embeddings makes a sparse one"
        if self.optimizer == "adagrad" and device == "cuda":
            return "torch's fused Adagrad runs on the CPU only; on a GPU use --optimizer sgd or drop the flag"
        return None

    def _check_data(self, spec, model_spec) -> None:
        """--data and its loader: one line for a mode, model or loader that cannot read it (the dataset's own
        checks, which read it, run once the world size is known: bench.data.feed.check)."""
        if self.data is None:
            for name in ("loader", "loader_workers"):
                if getattr(self, name) is not None:
                    raise BenchError(f"--{name.replace('_', '-')} applies to runs with --data PATH")
            return
        why = spec.no_data.get(None) or spec.no_data.get(self.strategy or spec.default_variant().strategy)
        if why:
            raise BenchError(why)
        tokens = formats.detect(self.data).tokens
        if tokens != (model_spec.workload.kind == "text"):
            held = "token ids" if tokens else "images"
            wants = "an image dataset" if tokens else "a tokens dataset"
            raise BenchError(f"--data {self.data} holds {held}; {self.model} trains on {model_spec.workload.units} "
                             f"and reads {wants} (docs/data.md)")
        if self.loader is not None and loader(self.loader).framework not in (spec.framework, "any"):
            raise BenchError(f"--loader {self.loader} feeds {loader(self.loader).framework}; {self.mode} is "
                             f"{spec.framework} (its loader: {default_loader(spec.framework)})")

    def _check_goal(self) -> None:
        """--epochs and what goes with it (bench.measure.goal): one line for each contradiction."""
        goal_options = ("target_accuracy", "eval_every", "base_lr", "weight_decay", "checkpoint_every",
                        "checkpoint_dir", "resume_from")
        if self.epochs is None:
            named = [n for n in goal_options if getattr(self, n) is not None]
            # 0 as well as unset: run files and ranks' configs written before the default became the batch's
            # (hvdbench wrote warmup_epochs 0.0 into every run's config) still run
            named += ["warmup_epochs"] * (self.warmup_epochs not in (None, 0))
            named += [n for n, d in (("lr_scaling", "linear"), ("lr_decay", "cosine"),
                                     ("label_smoothing", 0.0), ("stop_at_target", True), ("optimizer", "sgd"))
                      if getattr(self, n) != d]
            if named:
                raise BenchError(f"--{named[0].replace('_', '-')} applies to runs with --epochs N")
            return
        if self.data is None:
            raise BenchError("--epochs trains on a dataset: add --data PATH (bench data make writes one)")
        if self.is_resolved:
            return
        if self.duration is not None and not self.stop_at_target:
            raise BenchError("--duration and --all-epochs contradict: --all-epochs trains every epoch, --duration "
                             "stops when the time is up")
        for name in ("windows", "steps_per_window"):
            if getattr(self, name) is not None:
                raise BenchError(f"--epochs and --{name.replace('_', '-')} contradict: with --epochs every window "
                                 "is one epoch, and the run ends after the epochs (or at the target)")
        if self.warmup_steps:
            raise BenchError("--epochs and --warmup-steps contradict: with --epochs every step belongs to an epoch "
                             "(--warmup-epochs warms the learning rate up)")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise BenchError(f"--target-accuracy is a top-1 accuracy: 0 < A <= 1 (got {self.target_accuracy})")
        if self.lr_scaling not in goal.SCALINGS:
            raise BenchError(f"--lr-scaling takes {' or '.join(goal.SCALINGS)} (got '{self.lr_scaling}')")
        if self.optimizer not in goal.OPTIMIZERS:
            raise BenchError(f"--optimizer takes {', '.join(goal.OPTIMIZERS)} (got '{self.optimizer}')")
        if self.lr_decay not in goal.DECAYS:
            raise BenchError(f"--lr-decay takes {', '.join(goal.DECAYS)} (got '{self.lr_decay}')")
        if self.warmup_epochs is not None and not 0 <= self.warmup_epochs < self.epochs:
            raise BenchError(f"--warmup-epochs must be >= 0 and below --epochs {self.epochs} "
                             f"(got {self.warmup_epochs})")
        if self.weight_decay is not None and self.weight_decay < 0:
            raise BenchError(f"--weight-decay must be >= 0 (got {self.weight_decay})")
        if not 0 <= self.label_smoothing < 1:
            raise BenchError(f"--label-smoothing must be >= 0 and < 1 (got {self.label_smoothing})")
        if self.checkpoint_dir is not None and self.checkpoint_every is None:
            raise BenchError("--checkpoint-dir applies to runs with --checkpoint-every N")
        if self.checkpoint_every is not None and self.checkpoint_every % (self.eval_every or 1):
            raise BenchError(f"--checkpoint-every {self.checkpoint_every} must be a multiple of --eval-every "
                             f"{self.eval_every} (a checkpoint is written after an evaluation)")

    @property
    def embedding(self) -> str:
        """The text model's embedding as its builders take it: 'tied' (the paper) or 'sparse' (untied)."""
        return "sparse" if self.sparse_embeddings else "tied"

    @property
    def compiles(self) -> bool:
        """A compiler builds the step: --compile (PyTorch) or --xla (TensorFlow); it compiles in the first step."""
        return self.compile not in (None, "none") or bool(self.xla)

    @property
    def is_resolved(self) -> bool:
        return self.profile is not None

    def resolve(self, device: str, np: int) -> RunConfig:
        """Fill defaults for the device the run lands on ('cpu' or 'cuda') and the world size."""
        spec = model(self.model)
        profile = PROFILES[(self.tuned, device)]
        batch = self.batch_size or profile.batch_size
        to_goal = {}
        if goal.active(self):  # every window one epoch of the rank's shard (bench.measure.goal)
            # the ranks whose batches one update applies: all, or one worker's under asynchronous ps
            label = f"{self.mode}:{self.strategy}" if self.strategy else self.mode
            update_ranks = 1 if variant(label).exchange == "ps" else np
            seq_len = spec.workload.resolve(spec, self, profile).get("seq_len")
            per_rank = epoch_batches(self.data, seq_len, np, batch)
            to_goal = dict(warmup_steps=0, steps_per_window=per_rank, windows=self.epochs,
                           attribution_steps=self.attribution_steps or 0, eval_every=self.eval_every or 1,
                           learning_rate=goal.peak_rate(self, batch * update_ranks),
                           warmup_epochs=goal.warmup_epochs(self, batch * update_ranks),
                           momentum=goal.async_momentum(MOMENTUM, np) if update_ranks == 1 < np else MOMENTUM,
                           weight_decay=goal.WEIGHT_DECAY if self.weight_decay is None else self.weight_decay)
        resolved = dict(
            device=Device(device),
            np=np,
            batch_size=self.batch_size or profile.batch_size,
            num_classes=self.num_classes or (data_classes(self.data) if self.data else spec.default_classes),
            **spec.workload.resolve(spec, self, profile),
            warmup_steps=profile.warmup_steps if self.warmup_steps is None else self.warmup_steps,
            steps_per_window=self.steps_per_window or profile.steps_per_window,
            windows=self.windows or profile.windows,
            attribution_steps=(default_steps(self.steps_per_window or profile.steps_per_window,
                                             self.windows or profile.windows)
                               if self.attribution_steps is None else self.attribution_steps),
            profile=profile.name,
            strategy=self.strategy or mode(self.mode).default_variant().strategy,
            loader=(self.loader or default_loader(mode(self.mode).framework)) if self.data else None,
            **self.tuning(spec, device),
        )
        return dataclasses.replace(self, **{**resolved, **to_goal})

    def tuning(self, spec, device: str) -> dict[str, Any]:
        """The model-side settings of the profile, each given by the user or by it (TUNED_SETTINGS), with the other
        framework's left None: compile, channels_last, fused_optimizer (PyTorch), xla (TensorFlow). --tuned
        leaves out what cannot apply: NHWC for a text model, the fused optimizer where torch has none (sparse
        gradients; Adagrad on a GPU), XLA under parameter servers and on the CPU."""
        framework = mode(self.mode).framework
        own = dict(TUNED_SETTINGS[framework]) if self.tuned else {}
        no_fused = self._no_fused_optimizer(device)
        if no_fused and self.fused_optimizer:
            raise BenchError(f"--fused-optimizer: {no_fused}")
        if no_fused:
            own.pop("fused_optimizer", None)
        if self.strategy == "ps" or device != "cuda":  # on the CPU XLA ran ResNet-50 at 0.29-0.43x of TensorFlow's
            own.pop("xla", None)                        # kernels (docs/measured/2026-11-27-xla.md): a GPU's setting
        settings = {}
        for name, paper in PAPER_SETTINGS[framework].items():
            given = getattr(self, name)
            if given is None:
                given = own.get(name, paper)
                if name == "channels_last" and spec.workload.kind != "image":
                    given = False
            settings[name] = given
        return settings

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


def epoch_batches(path: str, seq_len: int | None, world: int, batch: int) -> int:
    """The batches each of ``world`` ranks trains on per epoch of a --data dataset's training split (--epochs:
    one window each; bench.data.datasets.rank_samples); a tokens dataset's samples are of ``seq_len``."""
    try:
        per_rank = rank_samples(load_dataset(path, seq_len).train, world, batch)
    except BenchError as exc:
        raise BenchError(f"--data {path}: {exc}") from None
    if per_rank is None:
        raise BenchError(f"--epochs needs the training split's sample count; {path} does not say it (TFRecord "
                         "shards: meta.json's counts, as bench data make writes them)")
    return per_rank // batch


def data_classes(path: str) -> int:
    """A --data run's classifier outputs by default: the dataset's classes."""
    return class_count(path)


def cli_options() -> dict[str, Option]:
    """Every run option by name, as declared: RunConfig's fields, then the plugins'."""
    fields = {f.name: f.metadata["option"] for f in dataclasses.fields(RunConfig) if "option" in f.metadata}
    return {**fields, **{name: p.option for name, p in PLUGIN_OPTIONS.items()}}


def option_specs() -> list[tuple[str, Any, Any, Option]]:
    """(name, type, default, declaration) of every run option, for the commands that build flags from them."""
    return declared(RunConfig) + [(p.name, p.type, p.default, p.option) for p in PLUGIN_OPTIONS.values()]


def command_line(cfg: RunConfig) -> list[str]:
    """The mode command and the flags that give ``cfg`` back (options at their defaults left out): what a
    manifest runs (bench k8s). Parsing them with the mode command makes the same RunConfig."""
    args = [cfg.mode]
    for name, _, default, how in option_specs():
        value = cfg.extra.get(name, default) if name in PLUGIN_OPTIONS else getattr(cfg, name)
        if value == default:
            continue
        flag = how.flag or f"--{name.replace('_', '-')}"
        if isinstance(value, bool):
            on, _, off = flag.partition("/")
            args.append(on if value else off)
        else:
            args += [flag, str(value.value if isinstance(value, Enum) else value)]
    return args
