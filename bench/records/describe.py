"""What a result ran on and with, in the words its cell, its report and its reference are matched by: the device
kind and GPU model, the model-side tuning, and the data source. Pure functions of a result's dict."""

from __future__ import annotations

from typing import Any


def device_of(result: dict[str, Any]) -> str:
    """The kind of device a run measured: "cpu", or "cuda" and the GPU model(s) its ranks used (NVML's names
    where a TensorFlow rank's device label carries none)."""
    device = result["config"].get("device") or "cpu"
    if device != "cuda":
        return device
    ranks = result["environment"].get("ranks") or []
    names = {r["device"].split(" ", 1)[1] for r in ranks if r.get("device", "").startswith("cuda") and
             " " in r["device"]}
    if not names:
        names = {g.get("name") for g in ((result["environment"].get("nvml") or {}).get("gpus") or []) if g.get("name")}
    return " ".join(["cuda", "+".join(sorted(names))]) if names else "cuda"


def tuning_of(config: dict[str, Any]) -> str:
    """What a run's model ran with beyond the paper's eager loop (--compile, --fused-optimizer, --xla), in words; ''
    for none (and for records older than these options)."""
    parts = [f"compiled ({config['compile']})"] if config.get("compile") not in (None, "none") else []
    parts += ["fused optimizer"] * bool(config.get("fused_optimizer"))
    parts += ["XLA"] * bool(config.get("xla"))
    return ", ".join(parts)


def source_of(result: dict[str, Any]) -> str:
    """What a run trained on, for its cell: 'synthetic', or the dataset (its format, classes and training samples:
    two datasets of one format are two cells, wherever each lies) and how it was read (the loader and its worker
    processes per rank: 2 and 8 workers are two settings, never repeats of one), and a run that trained to a goal
    (--epochs, --target-accuracy: its windows are epochs, with evaluations between them) apart from a throughput
    run."""
    section = result.get("input") or {}
    if section.get("source") != "dataset":
        return "synthetic"
    workers = "/".join(str(w) for w in section.get("workers") or [])
    config = result.get("config") or {}
    goal = f", {config['epochs']} epoch(s)" if config.get("epochs") else ""
    goal += f" to top-1 {config['target_accuracy']}" if goal and config.get("target_accuracy") is not None else ""
    parts = [f"{section['format']} via {section['loader']}"]
    if section.get("classes") is not None and section.get("train_samples") is not None:
        parts.append(f"{section['classes']} classes x {section['train_samples']:,} samples")
    parts += [f"{workers} workers"] * bool(workers)
    return ", ".join(parts) + goal
