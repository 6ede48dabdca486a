"""Results: one schema-versioned JSON per run (never overwritten), one CSV row, one terminal table."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import fcntl
import io
import json
import os
import secrets
import statistics
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bench import files
from bench.config import RunConfig
from bench.data import feed
from bench.errors import BenchError, ResultNotWhole
from bench.launching.detect import LaunchInfo
from bench.measure import goal, telemetry
from bench.measure.builtin_trackers import trackers
from bench.measure.raw import Gathered, RankRecord
from bench.measure.stats import summarize, throughput_summary
from bench.measure.tracker import Ranks
from bench.models import describe_inputs, model
from bench.records import peaks, references, schema, store
from bench.records.header import header
from bench.records.metrics import METRICS, sample_symbol
from bench.typed import first_problem

# A sweep folder keeps each cell's run configuration (JSON, not a result) in this subfolder; readers skip it.
CONFIGS_DIR = "configs"
MANIFEST = "manifest.json"  # a sweep folder's manifest (JSON, not a result)

CSV_NAME = "results.csv"
# One row per run: what identifies it, every registered metric, then the run's checks.
CSV_FIELDS = [
    "schema_version", "run_id", "created_utc", "status", "mode", "model", "precision", "batch_size",
    "image_size", "seq_len", "world_size", "device", "launcher", "sample_unit", *METRICS, "ci95_low", "ci95_high",
    "median", "ranks_in_sync", "hosts",
]


def check_output_dir(path: str | os.PathLike) -> Path:
    """Create the output directory and prove it is writable, before any work is done."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{secrets.token_hex(4)}"
        files.write_new(probe, "probe\n")  # the writer's own way: temporary file, then link or exclusive create
    except OSError as exc:
        raise BenchError(f"output directory '{out}' is not writable: {files.disk_reason(exc)}") from None
    try:
        with csv_lock(out, probe.name):  # the lock results.csv is added under (csv_lock), tried before any work
            pass
    except OSError as exc:
        raise BenchError(f"output directory '{out}' cannot lock a file for results.csv ({files.disk_reason(exc)}): "
                         "a file system without POSIX locks; choose another --output") from None
    finally:
        probe.unlink(missing_ok=True)
    csv_path = out / CSV_NAME
    if csv_path.exists() and csv_path.stat().st_size > 0:
        with open(csv_path, newline="") as f:
            header = next(csv.reader(f), [])
        if header != CSV_FIELDS:
            raise BenchError(f"{csv_path} has a different column layout (another schema version); "
                             "choose another --output")
    return out


def compile_seconds(cfg: RunConfig, ranks: list[RankRecord]) -> float | None:
    """--compile or --xla: how much longer the first step took than a compiled step, on the slowest rank: the
    compilation (and the first step's own one-off costs, which an uncompiled run has too and which are small beside
    it). A compiled step's time is the median warmup step, or the fastest window's per-step time without warmup.
    None for a run that compiles nothing."""
    if not cfg.compiles:
        return None

    def steady(r: RankRecord) -> float:
        if r.warmup_step_s:
            return statistics.median(r.warmup_step_s)
        return min(r.window_s) / cfg.steps_per_window
    return max(max(0.0, r.first_step_s - steady(r)) for r in ranks)


def build_result(cfg: RunConfig, launch: LaunchInfo, gathered: Gathered, run_id: str) -> schema.Result:
    """The run's result from every rank's raw samples (see bench.measure.stats for the formulas). Where it does
    not match its model, the raw samples are kept as the store keeps a record it cannot write, and the error
    says where: a finished measurement is never lost."""
    try:
        return _assemble(cfg, launch, gathered, run_id)
    except ValidationError as exc:
        text = json.dumps(dataclasses.asdict(gathered), indent=2, default=str) + "\n"
        raise ResultNotWhole(f"the result {run_id} does not match its schema ({first_problem(exc)}); its "
                             f"raw samples are {store.kept(f'{run_id}-raw.json', text)}") from None


def _assemble(cfg: RunConfig, launch: LaunchInfo, gathered: Gathered, run_id: str) -> schema.Result:
    ranks = gathered.ranks
    replicas = ranks[0].replicas
    if any(r.replicas != replicas for r in ranks):
        raise BenchError("ranks drive different numbers of replicas; cannot compare their windows")
    world = replicas * len(ranks)
    samples_per_window = cfg.batch_size * replicas * cfg.steps_per_window
    window_s = gathered.window_s
    init_s = max(r.init_s for r in ranks)
    train_s = max(r.train_s for r in ranks)
    checksums = [r.checksum for r in ranks]
    extra = [r.sync_report for r in ranks if r.sync_report]
    workload = workload_record(cfg)
    summary = summary_of(cfg, ranks, workload, world, init_s, train_s)
    fields: dict[str, Any] = dict(
        **header(run_id),
        status="ok",
        mode=cfg.mode,
        config=cfg.to_dict(),
        launcher=launch.launcher,
        world_size=world,
        processes=len(ranks),
        replicas_per_process=replicas,
        workload=workload,
        environment=schema.Environment(**{**gathered.environment, "ranks": [
            schema.RankInfo(rank=r.rank, local_rank=r.local_rank, host=r.host, device=r.device) for r in ranks]}),
        timing=dict(
            unit="s",
            init_s=init_s,
            first_step_s=max(r.first_step_s for r in ranks),
            train_s=train_s,
            timed_windows_s=max(sum(r.window_s) for r in ranks),
            compile_s=compile_seconds(cfg, ranks),
            per_rank=[{"rank": r.rank, "setup_s": r.setup_s, "first_step_s": r.first_step_s, "init_s": r.init_s,
                       "train_s": r.train_s} for r in ranks],
            definitions=TIMING_DEFINITIONS,
        ),
        samples=schema.Samples(
            unit="s",
            steps_per_window=cfg.steps_per_window,
            samples_per_window_per_rank=samples_per_window,
            replicas_per_rank=replicas,
            window_s=window_s,
            warmup_step_s=[r.warmup_step_s for r in ranks],
        ),
        summary=summary,
        utilisation=utilisation_record(cfg, summary.model_tflops_per_gpu, ranks[0], gathered.environment),
        training=goal.section(cfg, ranks, init_s),
        sync=schema.Sync(
            param_checksums=checksums,
            ranks_in_sync=len(set(checksums)) == 1 and all(c and not c.startswith("diverged") for c in checksums)
            and all(x.get("in_sync", True) for x in extra),
            reports=extra,
            param_sum_initial=[r.param_sum_initial for r in ranks],
            param_sum_final=[r.param_sum_final for r in ranks],
            params_changed=all(r.param_sum_initial != r.param_sum_final for r in ranks),
            definition="param_checksums: SHA-256 of every trainable parameter after the run, per rank",
        ),
    )
    job = Ranks(cfg=cfg, ranks=ranks, run_id=run_id, world=world, rate=summary.samples_per_sec_total, init_s=init_s)
    for tracker in trackers():  # each measurement's section, from every rank's part (bench.measure.tracker)
        tracker.place(fields, tracker.section(job))
    fields["timing"] = schema.Timing(**fields["timing"])
    return schema.Result(**fields)


def summary_of(cfg: RunConfig, ranks: list[RankRecord], workload: schema.Workload, world: int, init_s: float,
               train_s: float) -> schema.Summary:
    """The headline (bench.measure.stats: every timed sample over the slowest rank's time) and what follows it."""
    # every step the clock of train_s saw: the warmup, --data's untimed settling steps (every rank takes as many:
    # they agree on stopping, bench.measure.loop) and the windows'
    steps_after_init = len(ranks[0].warmup_step_s) + feed.settled_steps(ranks) + \
        len(ranks[0].window_s) * cfg.steps_per_window
    samples_after_init = world * cfg.batch_size * steps_after_init
    warmup = [max(ts) for ts in zip(*[r.warmup_step_s for r in ranks], strict=True)]
    tokens, flops = workload.tokens_per_sample, workload.train_flops_per_sample
    headline = throughput_summary([r.window_s for r in ranks], cfg.batch_size * ranks[0].replicas *
                                  cfg.steps_per_window, world)
    rate, per_gpu = headline["samples_per_sec_total"], headline["samples_per_sec_per_gpu"]
    return schema.Summary(
        **headline,
        # Wall-clock views (seed 003): all samples after init over the slowest rank's train time, and over init +
        # train (time to a trained model from process start).
        samples_per_sec_wall_train=samples_after_init / train_s if train_s > 0 else None,
        samples_per_sec_wall_total=samples_after_init / (init_s + train_s),
        warmup_step_s=summarize(warmup) if warmup else None,
        tokens_per_sec_total=rate * tokens if tokens else None,
        tokens_per_sec_per_gpu=per_gpu * tokens if tokens else None,
        model_tflops_per_gpu=per_gpu * flops / 1e12 if flops else None,
    )


def tracker_warnings(result: schema.Result) -> list[str]:
    """Each tracker's one-line warning about the run's figures, where it has one."""
    found = (tracker.warning(tracker.read(result), result) for tracker in trackers())
    return [line for line in found if line]


def tracker_rows(result: schema.Result) -> list[tuple[str, str, str]]:
    """Every tracker's rows for the run's table, in the trackers' order."""
    return [row for tracker in trackers() for row in tracker.rows(tracker.read(result))]


TIMING_DEFINITIONS = {
    "init_s": "process start to end of the first (synchronised) training step; slowest rank",
    "train_s": "end of init to end of the last timed window, warmup included; slowest rank",
    "compile_s": "--compile or --xla: the first step's time beyond a compiled step's (first_step_s - the median "
                 "warmup step, else the fastest window's step); inside init_s; slowest rank",
    "graphs_compiled_in_first_step": "--compile or --xla: graphs TorchDynamo or XLA compiled in the first step "
                                     "(1 or more expected: it compiles); fewest on any rank",
    "graphs_compiled_in_warmup": "--compile or --xla: graphs compiled in the untimed steps after the first (0 "
                                 "expected: a compilation there moves compile_s's compiled step); most on any rank",
    "graphs_compiled_in_windows": "--compile or --xla: graphs TorchDynamo or XLA compiled during the timed windows "
                                  "(0 expected: a compilation there was timed); most on any rank",
}


def utilisation_record(cfg: RunConfig, model_tflops: float | None, rank0: RankRecord,
                       environment: dict[str, Any]) -> schema.Utilisation:
    """MFU against this device's measured GEMM peak (`bench peak`) and its published peak
    (bench.records.peaks), for rank 0's host and device: the ranks are taken to be alike."""

    device = rank0.device
    gpu_name = device.split(" ", 1)[1] if device.startswith("cuda:") and " " in device else None
    gpus = (environment.get("nvml") or {}).get("gpus") or []
    if gpu_name is None and device.startswith("/physical_device:GPU") and gpus:
        gpu_name = gpus[0].get("name")  # TensorFlow's label has no model name: NVML's first GPU
        device = f"cuda:0 {gpu_name}"
    return peaks.utilisation(model_tflops, cfg.precision.value, cfg.output, rank0.host, device, gpu_name)


def workload_record(cfg: RunConfig) -> schema.Workload:
    """What the run trained on: the workload's kind and sample unit, the model's size and training FLOPs."""
    spec = model(cfg.model)
    w = spec.workload
    return schema.Workload(kind=w.kind, unit=w.unit, symbol=w.symbol, model=spec.name,
                           parameters=spec.parameters(cfg.num_classes, cfg.sparse_embeddings),
                           gradient_bytes=spec.gradient_bytes(cfg.num_classes, untied=cfg.sparse_embeddings),
                           train_flops_per_sample=spec.train_flops_per_sample(cfg),
                           tokens_per_sample=w.tokens_per_sample(cfg))


def load_result(path: str | os.PathLike) -> schema.Result:
    """A result file, read (older schemas upgraded to the current one) as its model."""
    return upgraded(store.read(path, store.Kind.RESULT), str(path))


def upgraded(data: dict[str, Any], where: str) -> schema.Result:
    """A result as read from ``where``: upgraded to the current schema, then read as its model (one clear line
    naming the file where it does not match); the model remembers the file."""
    data = schema.upgrade(data)
    schema.validate(data, where)
    result = schema.Result.model_validate(data)
    result._file = where
    return result


def telemetry_samples(gathered: Gathered) -> list[telemetry.GpuSample]:
    return telemetry.samples_of(gathered.ranks)


class CsvNotUpdated(ResultNotWhole):
    """The run's record was written but its results.csv row was not: the CSV is exactly as it was."""


def write_result(out_dir: Path, result: schema.Result, samples: list[telemetry.GpuSample] | None = None) -> Path:
    """Write the run as a unit: ``<run_id>.json`` (whole, never overwriting; the record), the telemetry time
    series beside it (``<run_id>-telemetry.csv``) when there is one, and the results.csv row. The JSON lands
    first (with its fallback folder when the output refuses it); a time series the disk refuses is a warning; if
    the row cannot be added, the CSV is left exactly as it was and the error says what was written."""
    final = store.write(out_dir / f"{result.run_id}.json", result)
    series = result.telemetry.samples_csv
    if samples and series:  # after the record: a disk that refuses the time series costs a warning, never the result
        try:
            _write_atomic_csv(out_dir / series, telemetry.COLUMNS, telemetry.rows(samples))
        except (OSError, BenchError) as exc:
            reason = files.disk_reason(exc) if isinstance(exc, OSError) else str(exc)
            print(f"warning: the telemetry time series {series} was not written "
                  f"({reason}); the result {final} is whole", file=sys.stderr)
    csv_path = out_dir / CSV_NAME
    try:
        append_csv(csv_path, csv_row(result))
    except OSError as exc:
        raise CsvNotUpdated(f"the result is written to {final}, but its row could not be added to {csv_path} "
                            f"({files.disk_reason(exc)}); {csv_path.name} is as it was") from None
    return final


def _write_atomic_csv(path: Path, fields: list[str], rows: list[dict[str, Any]]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    try:
        files.write_new(path, buf.getvalue())
    except FileExistsError:
        raise BenchError(f"{path} already exists; not overwritten") from None


def csv_row(result: schema.Result) -> dict[str, Any]:
    cfg, s = result.config, result.summary
    ci = s.ci95 or [None, None]
    return {
        "schema_version": result.schema_version, "run_id": result.run_id,
        "created_utc": result.created_utc, "status": result.status, "mode": result.mode,
        "model": cfg.model, "precision": cfg.precision, "batch_size": cfg.batch_size,
        "image_size": cfg.image_size, "seq_len": cfg.seq_len, "world_size": result.world_size,
        "device": cfg.device,
        "launcher": result.launcher, "sample_unit": result.workload.unit,
        **{key: metric.value(result) for key, metric in METRICS.items()},
        "ci95_low": ci[0], "ci95_high": ci[1], "median": s.median,
        "ranks_in_sync": result.sync.ranks_in_sync,
        "hosts": " ".join(result.hosts),
    }


# The lock results.csv is replaced under: a file of its own beside it, opened for writing, because the CSV itself is
# replaced whole and NFS (and Lustre without flock) emulates flock with fcntl locks, which need a file opened for
# writing (a folder opened read-only, the lock before, fails there).
CSV_LOCK_NAME = ".results.csv.lock"


@contextlib.contextmanager
def csv_lock(folder: Path, name: str = CSV_LOCK_NAME):
    fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT, 0o666)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)  # POSIX record lock: NFS and Lustre carry it to the server
        yield
    finally:
        os.close(fd)


def append_csv(path: Path, row: dict[str, Any]) -> None:
    """Add ``row`` to the CSV at ``path`` (made with its header if new) as a whole-file replacement under a
    lock: a full disk or a crash leaves the previous file exactly as it was, never a torn or emptied one."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS)
    with csv_lock(path.parent):
        old = path.read_text() if path.exists() else ""
        if not old:
            writer.writeheader()
        writer.writerow(row)
        files.replace(path, old + buf.getvalue())


def render_table(result: schema.Result):
    """The terminal table: every registered metric the run has, then the run's checks."""
    from rich.table import Table

    cfg, s, tele, util = result.config, result.summary, result.telemetry, result.utilisation
    shape = describe_inputs(cfg)
    symbol = sample_symbol(result)
    title = (f"{result.mode}  {cfg.model} {shape}  "
             f"batch {cfg.batch_size}/device  {cfg.precision}  {result.world_size} x {cfg.device}")
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("unit / note")
    for metric in METRICS.values():
        value = metric.value(result)
        if not metric.in_table or (metric.section == "telemetry" and not tele.available):
            continue
        if value is None and metric.key.startswith("tokens"):
            continue  # not a text workload
        table.add_row(metric.label_for(result), _num(value, metric.fmt), metric.unit_for(result))
        if metric.key == "samples_per_sec_total":
            ci = s.ci95
            table.add_row("  95% CI, within run", f"{ci[0]:.2f} .. {_num(ci[1], '.2f')}" if ci else "n/a",
                          f"{symbol}/s (windows of this launch; repeats give the run-to-run spread)")
            if s.total is not None:
                table.add_row("  per window: median / min / max",
                              f"{s.median:.2f} / {s.total.min:.2f} / {s.total.max:.2f}", f"{symbol}/s")
    if util is not None:
        for label, mfu, peak in (("measured peak", util.mfu_measured, util.measured_peak_tflops),
                                 ("published peak", util.mfu_spec, util.spec_peak_tflops)):
            if mfu is not None:
                table.add_row(f"MFU ({label})", f"{100 * mfu:.1f}", f"% of {peak:.3g} TFLOP/s")
    try:
        against = references.standing(result)
        none = references.unmatched(result) if against is None else None
    except BenchError as exc:  # the user's reference file: its one line, in place of the comparison
        table.add_row("vs reference", "n/a", str(exc))
    else:
        if against is not None:
            share, reference = against
            table.add_row("vs reference", f"{100 * share:.0f}", f"% of {reference.label()}")
        elif none is not None:
            table.add_row("vs reference", "none", none)
    table.add_row("windows x steps", f"{len(result.samples.window_s[0])} x {cfg.steps_per_window}",
                  f"+ {cfg.warmup_steps} warmup steps")
    table.add_row("ranks in sync", "yes" if result.sync.ranks_in_sync else "NO", "parameter checksums equal")
    for row in (*goal.table_rows(result.training), *tracker_rows(result)):
        table.add_row(*row)
    return table


def _num(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)

