"""What a result ran on and with, in the words its cell, its report and its reference are matched by: the device
kind and GPU model, the model-side tuning, the exchange's settings, and the data source. Pure functions of a
result."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.vocabulary import HOROVOD_KNOBS

if TYPE_CHECKING:
    from bench.records.schema import Result, RunSettings


def device_of(result: Result) -> str:
    """The kind of device a run measured: "cpu", or "cuda" and the GPU model(s) its ranks used (NVML's names
    where a TensorFlow rank's device label carries none)."""
    device = result.config.device
    if device != "cuda":
        return device
    env = result.environment
    names = {r.device.split(" ", 1)[1] for r in env.ranks if r.device.startswith("cuda") and " " in r.device}
    if not names:
        names = {g.get("name") for g in ((env.nvml or {}).get("gpus") or []) if g.get("name")}
    return " ".join(["cuda", "+".join(sorted(names))]) if names else "cuda"


def tuning_of(config: RunSettings) -> str:
    """What a run's model ran with beyond the paper's eager loop (--compile, --fused-optimizer, --xla), in words; ''
    for none (and for records older than these options)."""
    parts = [f"compiled ({config.compile})"] if config.compile not in (None, "none") else []
    parts += ["fused optimizer"] * bool(config.fused_optimizer)
    parts += ["XLA"] * bool(config.xla)
    return ", ".join(parts)


KNOB_WORDS = {"fusion_threshold": lambda v: f"fusion {v / 2**20:g} MiB" if v else "no fusion",
              "cycle_time": lambda v: f"cycle {v:g} ms", "nccl_streams": lambda v: f"{v} NCCL streams"}


def exchange_of(result: Result) -> str:
    """How the gradients went beyond what the mode and --fp16-allreduce say, in words; '' for the defaults: each of
    Horovod's knobs whose value differs from Horovod's default, whatever set it (the option, the variable,
    horovodrun's flags: the values every Horovod rank recorded), sparse embedding gradients (and as dense), and
    tf-native ps's parameter servers beyond one."""
    config, parts = result.config, []
    knobs = result.environment.distribution or {}
    knobs = knobs if knobs.get("library") == "horovod" else {}
    for name, (_, default) in HOROVOD_KNOBS.items():
        value = knobs.get(name)
        if value is not None and value != default:
            parts.append(KNOB_WORDS[name](value) if isinstance(value, (int, float)) else f"{name} {value}")
    extra = config.model_extra or {}
    if extra.get("sparse_embeddings"):
        parts.append("sparse embeddings" + " as dense" * bool(extra.get("sparse_as_dense")))
    if config.strategy == "ps" and (extra.get("num_ps") or 1) != 1:
        parts.append(f"{extra['num_ps']} parameter servers")
    return ", ".join(parts)


def source_of(result: Result) -> str:
    """What a run trained on, for its cell: 'synthetic', or the dataset (its format, classes and training samples:
    two datasets of one format are two cells, wherever each lies) and how it was read (the loader and its worker
    processes per rank: 2 and 8 workers are two settings, never repeats of one), and a run that trained to a goal
    (--epochs, --target-accuracy: its windows are epochs, with evaluations between them) apart from a throughput
    run."""
    section = result.input
    if section is None or section.source != "dataset":
        return "synthetic"
    workers = "/".join(str(w) for w in section.workers)
    config = result.config
    goal = f", {config.epochs} epoch(s)" if config.epochs else ""
    goal += f" to top-1 {config.target_accuracy}" if goal and config.target_accuracy is not None else ""
    parts = [f"{section.format} via {section.loader}"]
    if section.classes is not None and section.train_samples is not None:
        parts.append(f"{section.classes} classes x {section.train_samples:,} samples")
    parts += [f"{workers} workers"] * bool(workers)
    return ", ".join(parts) + goal
