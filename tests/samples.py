"""The smallest record of each kind that matches its model (bench.records.kinds, bench.records.schema), for the
tests of the store's mechanics: write whole, never overwrite, fall back; and a run's result with the parts a test
sets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.data.feed import FeedRecord
from bench.measure.builtin_trackers import trackers
from bench.measure.raw import RankRecord
from bench.records.header import header, new_run_id
from bench.records.kinds import Allreduce
from bench.records.results import load_result
from bench.records.schema import Result
from bench.records.store import Kind

# A real result (tests/fixtures/README.md): a 1-rank torch-ddp run on the CPU.
FIXTURE = Path(__file__).parent / "fixtures" / "sweep-a" / "20261121T123741Z-torch-ddp-12708fb0.json"

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
    Kind.SOAK: {"host": "h", "config": {}, "torch": "2", "size": 8, "dtype": "float32", "seconds": 1.0,
                "devices": [{"label": "cpu (2 threads)", "model": "cpu", "window_tflops": [0.1], "median_tflops": 0.1,
                             "digest_before": "d", "digest_after": "d", "error": None}],
                "gpu_reason": "a CPU soak", "limits": {}, "limits_source": "s", "findings": [], "passed": True,
                "definitions": {}},
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


def merged(base: dict[str, Any], parts: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``parts`` laid over it: a dict over a dict merges key by key, anything else replaces."""
    out = dict(base)
    for key, value in parts.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def result(**parts: Any) -> Result:
    """A run's result: the fixture's, with ``parts`` laid over it (merged), read as the model."""
    base = load_result(FIXTURE).model_dump(mode="json", by_alias=True, exclude_unset=True)
    return Result.model_validate(merged(base, parts))


def rank(rank: int = 0, **fields: Any) -> RankRecord:
    """One rank's raw record (bench.measure.raw) with ``fields`` set and plain figures for the rest: one second
    windows, a tenth of a second for the first step and set-up, parameters that changed. A field named after a
    tracker (bench.measure.tracker: ``input``, ``host_load``, ``traffic``, ``attribution``, ...) is that tracker's
    part."""
    base: dict[str, Any] = {"local_rank": rank, "host": "h", "device": "cpu", "setup_s": 0.1, "first_step_s": 0.1,
                            "init_s": 0.2, "train_s": 4.0, "warmup_step_s": [], "window_s": [1.0, 1.0],
                            "checksum": "a", "param_sum_initial": 1.0, "param_sum_final": 2.0}
    names = {t.name for t in trackers()}
    parts = {k: fields.pop(k) for k in list(fields) if k in names}
    return RankRecord(rank=rank, **{**base, **fields}, parts=parts)


def fed(waits: list[float], **fields: Any) -> FeedRecord:
    """One rank's input pipeline record (bench.data.feed) with these waits per timed step: 4 classes of 40 JPEGs in
    class folders, read by one worker at 100 samples/s."""
    base: dict[str, Any] = {"h2d_step_s": None, "loader_rate": 100.0, "workers": 1, "queue_at_start": None,
                            "queue_depth": None, "settle_steps": 0, "epochs": 1.5, "format": "imagefolder",
                            "classes": 4, "train_samples": 40}
    return FeedRecord(wait_step_s=waits, **{**base, **fields})
