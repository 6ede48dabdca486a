"""A result as an MLflow run (``--mlflow URI`` on a run, ``bench history export mlflow URI``; docs/history.md).

What goes where, as MLflow's own documentation names its parts:

* the run: in the experiment ``--mlflow-experiment`` (default ``hvdbench``, made where missing), named by the
  result's run id, started and ended at the result's own times (created_utc is when it was written; the start is
  that less its init and training time), status FINISHED;
* params: the resolved configuration (``config``, one param per setting, lists and objects as JSON), the mode and
  the world size;
* metrics: the summary's figures (``samples_per_sec_total``, per device, the wall-clock ones, tokens and model
  TFLOP/s where the run has them, ``ci95_low``/``ci95_high``), each timed window's total rate as the series
  ``window_samples_per_sec`` (step: the window's index), the run's timing (``init_s``, ``train_s``,
  ``compile_s``...), MFU, and per rank the attribution (``rank<N>_compute_s``, ``_exchange_s``, ``_step_s``,
  ``_data_wait_s``, ``_exposed_s``) and the straggler's slowdown;
* tags: where and on what it ran, as bench history's rows keep it (``hvdbench.node``, ``hvdbench.gpu_model``, the
  driver, CUDA, NCCL, framework and Horovod versions, the image), the record's digest and run id
  (``hvdbench.digest``: a run already logged is found by it and not logged twice), and MLflow's own
  ``mlflow.source.name``;
* artifacts: the result JSON, and its trace files (``--trace``) under ``trace/``.

mlflow is imported here only (``pip install '.[mlflow]'``). A tracking server that is down or refuses is a
BenchError of one line: a run has written its result before it logs, and says so as a warning. MLflow's HTTP
client retries a request 7 times with a growing backoff (minutes); bench sets it to 2 retries and 30 s a request
unless MLFLOW_HTTP_REQUEST_MAX_RETRIES or MLFLOW_HTTP_REQUEST_TIMEOUT say otherwise.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bench.errors import BenchError
from bench.records import history

EXPERIMENT = "hvdbench"
# MLflow's limits (mlflow.utils.validation): a param's value, a tag's value
PARAM_CHARS, TAG_CHARS = 6000, 8000
RANK_FIGURES = ("compute_s", "exchange_s", "step_s", "data_wait_s", "exposed_s")
TIMING = ("init_s", "first_step_s", "train_s", "timed_windows_s", "compile_s")


def _text(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def params_of(record: dict[str, Any]) -> dict[str, str]:
    """One param per resolved setting (None as ``None``), the mode and the world size."""
    found = {f"config.{k}": _text(v if v is not None else "None", PARAM_CHARS)
             for k, v in sorted((record.get("config") or {}).items())}
    found.update(mode=str(record.get("mode")), world_size=str(record.get("world_size")))
    return found


def metrics_of(record: dict[str, Any]) -> list[tuple[str, float, int]]:
    """(key, value, step) of every figure logged: step 0 but for the windows' series."""
    found: list[tuple[str, float, int]] = []

    def put(key: str, value: Any, step: int = 0) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            found.append((key, float(value), step))
    summary = record.get("summary") or {}
    for key, value in summary.items():
        put(key, value)
    ci = summary.get("ci95") or []
    if len(ci) == 2:
        put("ci95_low", ci[0])
        put("ci95_high", ci[1])
    for i, rate in enumerate(summary.get("windows_total_samples_per_sec") or []):
        put("window_samples_per_sec", rate, i)
    timing = record.get("timing") or {}
    for key in TIMING:
        put(key, timing.get(key))
    for key in ("mfu_measured", "mfu_spec"):
        put(key, (record.get("utilisation") or {}).get(key))
    attribution = record.get("attribution") or {}
    for rank in attribution.get("per_rank") or []:
        for key in RANK_FIGURES:
            put(f"rank{rank.get('rank')}_{key}", rank.get(key))
    put("straggler_slowdown", (attribution.get("straggler") or {}).get("slowdown"))
    return found


def tags_of(row: history.Row) -> dict[str, str]:
    """Where and on what the record ran (its history row's columns), its digest and run id."""
    skip = {"headline", "low", "high", "time", "path", "unit"}
    tags = {f"hvdbench.{name}": _text(value, TAG_CHARS) for name, value in row.model_dump().items()
            if name not in skip and value is not None}
    tags["mlflow.source.name"] = "hvdbench"
    return tags


def _client(uri: str):
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    try:
        from mlflow import MlflowClient
    except ModuleNotFoundError:
        raise BenchError("--mlflow needs mlflow: pip install '.[mlflow]' (or mlflow-skinny)") from None
    return MlflowClient(tracking_uri=uri)


def _reason(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


def log(uri: str, path: Path, experiment: str = EXPERIMENT) -> tuple[str, bool]:
    """Log the result file ``path`` as a run of ``experiment`` at the tracking server ``uri``: (its MLflow run id,
    whether it was logged now; False where a run of the same record was there already). One line where it
    cannot."""
    text = path.read_bytes()
    row = history.row_of(path, text)
    if row.kind != "result":
        raise BenchError(f"{path}: a {row.kind} record; only training results are logged to MLflow")
    record = json.loads(text)
    try:
        return _log(_client(uri), experiment, path, record, row)
    except BenchError:
        raise
    except Exception as exc:  # MLflow raises MlflowException, requests' errors and OSError by turns
        raise BenchError(f"cannot log {path.name} to MLflow at {history.shown(uri)}: {_reason(exc)}") from None


def _log(client, experiment: str, path: Path, record: dict[str, Any], row: history.Row) -> tuple[str, bool]:
    from mlflow.entities import Metric, Param, RunTag

    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    there = client.search_runs([experiment_id], filter_string=f"tags.`hvdbench.digest` = '{row.digest}'",
                               max_results=1)
    if there:
        return there[0].info.run_id, False
    end_ms = int(row.time.timestamp() * 1000)
    timing = record.get("timing") or {}
    took = sum(v for v in (timing.get("init_s"), timing.get("train_s")) if isinstance(v, (int, float)))
    start_ms = end_ms - int(took * 1000)
    run = client.create_run(experiment_id, start_time=start_ms, run_name=row.run_id or path.stem)
    run_id = run.info.run_id
    try:
        metrics = [Metric(key, value, end_ms, step) for key, value, step in metrics_of(record)]
        params = [Param(k, v) for k, v in params_of(record).items()]
        tags = [RunTag(k, v) for k, v in tags_of(row).items()]
        for i in range(0, len(params), 100):  # MLflow's limits per batch: 100 params, 100 tags, 1000 metrics
            client.log_batch(run_id, params=params[i:i + 100])
        for i in range(0, len(tags), 100):
            client.log_batch(run_id, tags=tags[i:i + 100])
        for i in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[i:i + 1000])
        client.log_artifact(run_id, str(path))
        trace = record.get("trace") or {}
        for rank in trace.get("per_rank") or []:
            for name in rank.get("files") or []:
                file = path.parent / name
                if file.is_file():
                    client.log_artifact(run_id, str(file), artifact_path="trace")
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id, status="FINISHED", end_time=end_ms)
    return run_id, True

