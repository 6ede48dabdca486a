"""The smallest record of each kind that matches its model (bench.records.kinds, bench.records.schema), for the
tests of the store's mechanics: write whole, never overwrite, fall back."""

from __future__ import annotations

from typing import Any

from bench.records.header import header, new_run_id
from bench.records.kinds import Allreduce
from bench.records.store import Kind

_BODIES: dict[Kind, dict[str, Any]] = {
    Kind.VERIFY: {"config": {}, "modes": [], "cross_framework": None, "passed": True, "definitions": {},
                  "expected_differences": [], "params_kept": None},
    Kind.ALLREDUCE: {"config": {}, "launcher": "none", "world_size": 1, "environment": {}, "rows": [],
                     "all_correct": True, "definitions": {}},
    Kind.PEAK: {"host": "h", "device": "cpu (2 threads)", "precision": "fp32", "dtype": "float32", "torch": "2",
                "seconds_per_repeat": 0.1, "repeats": 1,
                "shapes": [{"m": 8, "n": 8, "k": 8, "tflops": [0.1], "tflops_median": 0.1}], "peak_tflops": 0.1,
                "peak_shape": [8, 8, 8], "definition": "d"},
    Kind.DIAGNOSE: {"config": {}, "executor": "slurm", "nodes": [], "left_out": [], "seconds": 0.0, "phases": {},
                    "figures": {}, "rules": [], "baseline": None, "findings": [], "passed": True},
    Kind.DATA_BENCH: {"config": {}, "format": "jpeg", "train_samples": 1, "rows": [], "batches": {},
                      "decode_rate_per_core": {}, "cores_to_feed": {}, "gpu_rates": {}, "definitions": {}},
    Kind.CONVERGE: {"target_accuracy": 0.5, "tolerance": 0.05, "median_final_top1": 0.5, "rows": [],
                    "verdict": "PASS", "reasons": [], "curves": []},
    Kind.TUNE: {"mode": "torch-ddp", "np": 1, "model": "resnet50", "precision": "fp32", "options": "", "common": {},
                "min_gain": 0.02, "max_batch": 64, "points": [], "knee": None, "why": "no batch ran"},
}


def record(kind: Kind) -> dict[str, Any]:
    """A valid record of ``kind`` (any but a run's result, which tests build from a real run or a fixture)."""
    if kind is Kind.BASELINE:
        return {"kind": kind.value, "from_run": "r", "created_utc": "now", "nodes": [], "signature": {},
                "figures": {}}
    version = (1,) if kind is Kind.DIAGNOSE else ()  # diagnose's record has a schema version of its own
    return {**header(new_run_id(kind.value), kind, *version), **_BODIES[kind]}


def allreduce(rows: list[tuple[int, float, float]], world_size: int = 2, **config: Any) -> Allreduce:
    """A bench allreduce record of ``world_size`` ranks (``config``: its op and backend) with one row per
    (bytes, time_s, busbw_GBps)."""
    return Allreduce(**{**record(Kind.ALLREDUCE), "world_size": world_size, "config": config,
                        "rows": [{"bytes": b, "time_s": t, "algbw_GBps": bw, "busbw_GBps": bw, "correct": True,
                                  "model": None} for b, t, bw in rows]})
