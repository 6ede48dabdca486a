"""bench report DIR: results -> report.md, report.csv and PNG plots (and with --html, report.html: the same report as
one self-contained page, its plots inline). It reads result files; it never runs anything.

Formulas (each stated in the report too):

* Step throughput T_n: a run's ``samples_per_sec_total`` (every timed sample over the slowest rank's timed time).
* Wall throughput W_n: ``samples_per_sec_wall_total`` = samples after init / (init_s + train_s) (seed 003).
* Speedup vs 1 rank of the same mode: S_n = T_n / T_1; wall speedup S^wall_n = W_n / W_1.
* Scaling efficiency: E_n = T_n / (n * T_1) = S_n / n.
* Speedup vs a plain single device (torch-single / tf-single, same framework, model, precision, batch,
  image size): T_n / T_single.
* Horovod vs native, same framework and setting at the same n: ratio T_horovod / T_native; the
  difference is called beyond noise only from repeated runs: two or more runs a side and between-run 95%
  intervals that do not overlap (bench.records.collect.significant); with one run a side it is not decided.

Where several results share a cell (mode, model, precision, batch, image size, classes, device and GPU model,
--fp16-allreduce, --channels-last, n), the one with the most recent ``created_utc`` is used and the others, on the
same hosts, are its repeats.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections import defaultdict
from dataclasses import dataclass, fields, replace
from pathlib import Path

from bench import files
from bench.commands import converge
from bench.commands.compare import input_cost
from bench.config import option
from bench.errors import BenchError
from bench.measure.attribution import STRAGGLER_THRESHOLD
from bench.measure.builtin_trackers import trackers
from bench.modes import MODES
from bench.records import references
from bench.records.collect import (
    STRICT_HELP,
    Key,
    between_runs,
    key_of,
    label_of,
    load_results,
    significant,
    table_cells,
)
from bench.records.describe import source_of
from bench.records.metrics import METRICS, device_word, devices_word, sample_symbol
from bench.records.results import tracker_warnings
from bench.records.schema import Result

# The registry's metrics each row of report.csv carries (bench.records.metrics), beside the derived speedups.
REPORTED = ("samples_per_sec_total", "samples_per_sec_per_gpu", "samples_per_sec_wall_total", "tokens_per_sec_total",
            "model_tflops_per_gpu", "init_s", "first_step_s")


@dataclass
class ScalingRow:
    """One cell at one world size: the headline and its intervals, speedup and efficiency against n = 1 (report.csv
    holds one line of these per row, ci95 as ci95_low and ci95_high)."""
    label: str
    model: str
    precision: str
    batch_size: int
    inputs: str
    extras: str
    device_name: str
    profile: str | None
    compile_s: float | None
    n: int
    unit: str
    device: str
    samples_per_sec_total: float  # REPORTED, each read through its Metric
    samples_per_sec_per_gpu: float
    samples_per_sec_wall_total: float | None
    tokens_per_sec_total: float | None
    model_tflops_per_gpu: float | None
    init_s: float
    first_step_s: float
    ci95: list[float | None] | None
    between_runs: int
    between_ci95_low: float | None
    between_ci95_high: float | None
    interval_kind: str
    run_id: str
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    efficiency: float | None = None
    wall_speedup: float | None = None
    vs_single: float | None = None


@dataclass(frozen=True)
class VersusRow:
    """A Horovod mode against its framework's native one, same setting and n."""
    setting: str
    n: int
    horovod: str
    native: str
    horovod_samples_per_sec: float
    native_samples_per_sec: float
    ratio: float
    faster: str
    by_pct: float
    beyond_noise: bool | None  # collect.significant: None where it is not decided
    runs: tuple[int, int]


@dataclass(frozen=True)
class TrafficRow:
    label: str
    setting: str
    n: int
    exchange: str
    tokens_per_sec: float | None
    computed: float  # bytes per step, from the shapes
    measured: float | None  # bytes per step the interfaces sent
    ratio: float | None
    not_comparable: str | None  # why the counters cannot see the exchange (NCCL over NVLink, ...)


@dataclass(frozen=True)
class AttributionRow:
    """One rank's step taken apart; ``rank`` None for a cell whose attribution was not measured (``note`` says why)."""
    label: str
    setting: str
    n: int
    rank: int | None = None
    host: str | None = None
    device: str | None = None
    compute_s: float | None = None
    exchange_s: float | None = None
    step_s: float | None = None
    exposed_s: float | None = None
    hidden_share: float | None = None
    data_wait_s: float | None = None
    note: str = ""


@dataclass(frozen=True)
class InputRow:
    label: str
    setting: str
    n: int
    data: float  # samples/s reading the dataset
    synthetic: float | None  # the median synthetic run of the same cell in the folder
    cost: float | None
    wait_share_max: float | None
    paced_by: str | None
    loader_rate: float | None


@dataclass(frozen=True)
class ReferenceRow:
    label: str
    setting: str
    n: int
    share: float
    reference: references.Reference
    rate: float


def headline_sentence(unit: str) -> str:
    """The report's definition of T, in the metric registry's words (bench.records.metrics)."""
    return f"Throughput T ({unit}/s) is {METRICS['samples_per_sec_total'].definition}."


def scaling_rows(chosen: dict[Key, dict[int, Result]], repeats: dict | None = None) -> list[ScalingRow]:
    """One row per cell and world size: the headline and its intervals, speedup and efficiency against n = 1.

    The interval each row is plotted with (``interval``, ``interval_kind``) is the between-run 95% interval of
    the headline where the cell has repeated runs, else the run's own within-run one. Speedup's interval is
    interval arithmetic on T_n / T_1 with T_1's interval of the same kind: [low_n / high_1, high_n / low_1]
    (efficiency's is that over n); at n = 1 it is 1 exactly."""
    repeats = repeats or {}
    rows = []
    for key in sorted(chosen, key=lambda k: (k.setting, k.label)):
        by_n = chosen[key]
        base = by_n.get(1)
        spec = MODES.get(key.mode)  # None: a mode of a plugin not loaded here
        reference = replace(key, label=spec.reference, mode=spec.reference, fp16_allreduce=False) if spec else None
        single = chosen.get(reference, {}).get(1) if spec else None
        spans = {n: _interval(r, repeats.get((key, n), [])) for n, r in by_n.items()}
        for n in sorted(by_n):
            r = by_n[n]
            t, w = r.summary.samples_per_sec_total, r.summary.samples_per_sec_wall_total
            between = between_runs([r, *repeats.get((key, n), [])])
            row = ScalingRow(label=key.label, model=key.model, precision=key.precision, batch_size=key.batch_size,
                             inputs=key.inputs, extras=", ".join(key.extras()), device_name=key.device,
                             profile=r.config.profile, compile_s=r.timing.compile_s,
                             n=n, unit=sample_symbol(r), device=device_word(r),
                             **{name: METRICS[name].value(r) for name in REPORTED}, ci95=r.summary.ci95,
                             between_runs=between.runs if between else 1,
                             between_ci95_low=max(0.0, between.ci95[0]) if between else None,
                             between_ci95_high=between.ci95[1] if between else None,
                             interval_kind=spans[n][1], run_id=r.run_id)
            if base is not None:
                t1 = base.summary.samples_per_sec_total
                row.speedup = t / t1
                row.efficiency = t / (n * t1)
                (low_n, high_n), (low_1, high_1) = spans[n][0] or (None, None), spans[1][0] or (None, None)
                if n == 1:  # the base against itself: 1, exactly
                    row.speedup_low = row.speedup_high = 1.0
                elif None not in (low_n, high_n, low_1, high_1) and low_1 > 0:
                    row.speedup_low, row.speedup_high = low_n / high_1, high_n / low_1
                w1 = base.summary.samples_per_sec_wall_total
                row.wall_speedup = w / w1 if w and w1 else None
            if single is not None:
                row.vs_single = t / single.summary.samples_per_sec_total
            rows.append(row)
    return rows


def paper_and_tuned(rows: list[ScalingRow]) -> list[tuple[ScalingRow, ScalingRow]]:
    """Rows of one mode, model, precision, inputs, device and n side by side: the paper's profile's and --tuned's
    (docs/profiles.md), where there is one of each."""
    groups: dict[tuple, tuple[list, list]] = {}
    for r in rows:
        paper, tuned = groups.setdefault((r.label, r.model, r.precision, r.inputs, r.device_name, r.n), ([], []))
        (tuned if str(r.profile or "").endswith("-tuned") else paper).append(r)
    return [(paper[0], tuned[0]) for paper, tuned in groups.values() if len(paper) == len(tuned) == 1]


def paper_and_tuned_section(rows: list[ScalingRow], unit: str, dev: str) -> list[str]:
    pairs = paper_and_tuned(rows)
    if not pairs:
        return []
    md = ["", "## Paper and tuned", "", "The same mode, model, precision and devices under the paper's profile and "
          "under --tuned (docs/profiles.md): what driving the hardware the way the field does changes.",
          "", f"| mode | model, precision | n | paper: setting | {unit}/s per {dev} | tuned: setting | "
          f"{unit}/s per {dev} | tuned / paper | compile s |", "|---|---|---|---|---|---|---|---|---|"]
    for paper, tuned in pairs:
        def setting(r):
            return f"b{r.batch_size}" + (f", {r.extras}" if r.extras else "")
        md.append(f"| {paper.label} | {paper.model} {paper.inputs} {paper.precision} | {paper.n} | "
                  f"{setting(paper)} | {paper.samples_per_sec_per_gpu:.2f} | {setting(tuned)} | "
                  f"{tuned.samples_per_sec_per_gpu:.2f} | "
                  f"{tuned.samples_per_sec_per_gpu / paper.samples_per_sec_per_gpu:.2f} | "
                  f"{_fmt(tuned.compile_s, '.1f')} |")
    return md


def _interval(result: Result, repeats: list[Result]) -> tuple[list[float | None] | None, str]:
    """The 95% interval of a cell's headline to draw, and its kind: between runs where there are repeats."""
    between = between_runs([result, *repeats])
    if between is not None:  # a rate is not negative: a lower bound below 0 (few runs, wide t) is drawn from 0
        return [max(0.0, between.ci95[0]), between.ci95[1]], f"between {between.runs} runs"
    ci = result.summary.ci95
    return ci, "within run" if ci else "none"


def horovod_vs_native(chosen: dict[Key, dict[int, Result]], repeats: dict) -> list[VersusRow]:
    rows = []
    for key, by_n in chosen.items():
        spec = MODES.get(key.mode)
        if spec is None or not spec.horovod or key.label != key.mode:
            continue
        native_mode = spec.peer
        for native_key in [k for k in chosen if k.mode == native_mode and k.setting == key.setting]:
            for n in sorted(set(by_n) & set(chosen[native_key])):
                h, nat = by_n[n], chosen[native_key][n]
                th, tn = h.summary.samples_per_sec_total, nat.summary.samples_per_sec_total
                decided = significant([h, *repeats[(key, n)]], [nat, *repeats[(native_key, n)]])
                rows.append(VersusRow(setting=key.setting_text(), n=n, horovod=key.label, native=native_key.label,
                                      horovod_samples_per_sec=th, native_samples_per_sec=tn, ratio=th / tn,
                                      faster=key.label if th > tn else native_key.label,
                                      by_pct=abs(th / tn - 1) * 100, beyond_noise=decided,
                                      runs=(1 + len(repeats[(key, n)]), 1 + len(repeats[(native_key, n)]))))
    return sorted(rows, key=lambda r: (r.setting, r.horovod, r.native, r.n))


def traffic_rows(results: list[Result]) -> list[TrafficRow]:
    """Every multi-process result's bytes per step, computed and measured (results that record them)."""
    rows = []
    for r in sorted(results, key=lambda r: (key_of(r).setting_text(), label_of(r), r.world_size)):
        t = r.traffic
        if t is None or not t.computed.bytes_per_step:
            continue
        computed, reading = t.computed.bytes_per_step, t.measured
        measured = reading.bytes_per_step if reading else None
        comparable = reading is None or reading.comparable
        rows.append(TrafficRow(label=label_of(r), setting=key_of(r).setting_text(), n=r.world_size,
                               exchange=t.computed.exchange, tokens_per_sec=r.summary.tokens_per_sec_total,
                               computed=computed, measured=measured,
                               ratio=measured / computed if measured and comparable else None,
                               not_comparable=None if reading is None or comparable else reading.not_comparable))
    return rows


def measurement_lines(results: list[Result]) -> list[str]:
    """The table rows of every tracker whose section a result keeps by name (a plugin's, bench.measure.tracker),
    as the run's table shows them: one line per row, for each result that has the section."""
    lines = []
    kept = [t for t in trackers() if t.field is None]
    for r in sorted(results, key=lambda r: (key_of(r).setting_text(), label_of(r), r.world_size)):
        for tracker in kept:
            lines += [f"| {label_of(r)} | {key_of(r).setting_text()} | {r.world_size} | {label} | {value} | {unit} |"
                      for label, value, unit in tracker.rows(tracker.read(r))]
    return lines


def warning_lines(results: list[Result]) -> list[str]:
    """What each run warned of after its table (its trackers' warnings: a busy host, graphs compiled in the windows,
    an input that paced the steps...), one list item each, so the report says what the run's standard error said."""
    lines = []
    for r in sorted(results, key=lambda r: (key_of(r).setting_text(), label_of(r), r.world_size)):
        lines += [f"- {label_of(r)}, {key_of(r).setting_text()}, n = {r.world_size} ({r.run_id}): "
                  f"{line.removeprefix('warning: ')}" for line in tracker_warnings(r)]
    return lines


def attribution_rows(chosen: dict[Key, dict[int, Result]]) -> list[AttributionRow]:
    """Every rank of every multi-process cell used: its step taken apart (bench.measure.attribution), the
    straggler named."""
    rows = []
    for key, by_n in sorted(chosen.items(), key=lambda kv: str(kv[0])):
        for n, r in sorted(by_n.items()):
            section = r.attribution
            if n < 2 or section is None:
                continue
            cell = {"label": key.label, "setting": key.setting_text(), "n": n}
            if not section.measured or not section.per_rank:
                rows.append(AttributionRow(**cell, note=f"not measured: {section.reason}"))
                continue
            slow = section.straggler
            fed = r.input
            fed_ranks = {p.rank: p for p in (fed.per_rank if fed else []) if p.rank is not None}
            for p in section.per_rank:
                notes = []
                if slow is not None and slow.rank == p.rank:
                    notes.append(f"straggler: compute x{slow.slowdown:.2f} the others'")
                if fed is not None and fed.paced_by_rank == p.rank and p.rank in fed_ranks:
                    mine = fed_ranks[p.rank]
                    how = "its device idle for data" if mine.idle_share is not None else "waits for data"
                    notes.append(f"its input sets the pace ({how} {mine.input_share or 0:.0%} of its steps)")
                rows.append(AttributionRow(**cell, rank=p.rank, host=p.host, device=p.device, compute_s=p.compute_s,
                                           exchange_s=p.exchange_s, step_s=p.step_s, exposed_s=p.exposed_s,
                                           hidden_share=p.hidden_share,
                                           data_wait_s=p.data_wait_s if fed_ranks else None, note="; ".join(notes)))
    return rows


def input_rows(results: list[Result]) -> list[InputRow]:
    """Every run that read a dataset: its throughput, the synthetic run of the same cell's (where the folder has
    one), the input cost (bench.commands.compare.input_cost), the largest wait share and the pacing rank."""
    synthetic: dict[tuple, list[float]] = {}
    for r in results:
        if source_of(r) == "synthetic":
            key = replace(key_of(r), source="")
            synthetic.setdefault((key, r.world_size), []).append(r.summary.samples_per_sec_total)
    rows = []
    for r in results:
        section = r.input
        if section is None or source_of(r) == "synthetic":
            continue
        key = key_of(r)
        twin = synthetic.get((replace(key, source=""), r.world_size))
        data, base = r.summary.samples_per_sec_total, statistics.median(twin) if twin else None
        rows.append(InputRow(label=key.label, setting=key.setting_text(), n=r.world_size, data=data,
                             synthetic=base, cost=input_cost("synthetic", key.source, base, data) if base else None,
                             wait_share_max=section.wait_share_max, paced_by=section.pacer,
                             loader_rate=min((p.loader_rate for p in section.per_rank if p.loader_rate),
                                             default=None)))
    return rows


def _fmt(x, spec=".2f", none="–"):
    return none if x is None else format(x, spec)


def scaling_series(rows: list[ScalingRow]) -> dict[tuple, list[ScalingRow]]:
    """The rows with a speedup, one series per mode and setting, by n."""
    series: dict[tuple, list] = defaultdict(list)
    for r in rows:
        if r.speedup is not None:
            series[(r.label, r.model, r.precision, r.batch_size, r.inputs, r.extras)].append(r)
    return {k: sorted(rs, key=lambda r: r.n) for k, rs in sorted(series.items())}


AXIS = {"GPU": "GPUs (n)", "rank": "ranks on the CPU (n)", "device": "GPUs or CPU ranks (n)"}


def scaling_figure(series: dict[tuple, list[ScalingRow]], metric: str, word: str):
    """speedup.png or efficiency.png: one line per series at the measured world sizes (the only ticks), each point
    with its 95% interval (scaling_rows says which kind; the legend's title names the kinds drawn), the ideal
    line labelled with its formula, the x axis in the runs' devices (GPUs, or ranks on the CPU)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    kinds, unbounded = set(), False
    for (label, model, precision, batch, size, extras), rs in series.items():
        ns = [r.n for r in rs]
        values = [getattr(r, metric) for r in rs]
        scale = [1.0 if metric == "speedup" else 1.0 / r.n for r in rs]
        # a between-run interval is about the runs' mean: the newest run drawn may lie outside it (the bar ends there)
        low = [max(0.0, v - r.speedup_low * k) if r.speedup_low is not None else 0.0
               for v, r, k in zip(values, rs, scale, strict=True)]
        high = [max(0.0, r.speedup_high * k - v) if r.speedup_high is not None else 0.0
                for v, r, k in zip(values, rs, scale, strict=True)]
        kinds |= {("between runs" if r.interval_kind.startswith("between") else r.interval_kind)
                  for r in rs if r.speedup_low is not None and r.n > 1}
        unbounded |= any(r.speedup_low is None and r.interval_kind != "none" for r in rs)
        ax.errorbar(ns, values, yerr=[low, high], marker="o", capsize=3,
                    label=f"{label} ({model} {size} b{batch} {precision}{', ' + extras if extras else ''})")
    measured = sorted({r.n for rs in series.values() for r in rs})
    ends = [1, max(measured)]
    ax.plot(ends, ends if metric == "speedup" else [1.0, 1.0], "k--", lw=1,
            label="ideal: S_n = n" if metric == "speedup" else "ideal: E_n = 1")
    ax.set_xticks(measured)
    ax.set_xticklabels([str(n) for n in measured])
    ax.set_xlabel(AXIS[word])
    ax.set_ylabel("speedup S_n = T_n / T_1 (step throughput)" if metric == "speedup"
                  else "scaling efficiency E_n = T_n / (n T_1)")
    ax.grid(alpha=0.3)
    drawn = " and ".join(sorted(kinds)) if kinds else "none (no interval recorded)"
    if unbounded:  # T_1's interval reaches 0 (or is missing at n = 1): T_n / T_1 has no upper bound
        drawn += "; no bar where T_1's is missing or reaches 0"
    ax.legend(fontsize=7, title=f"bars: 95% interval, {drawn}", title_fontsize=7)
    fig.tight_layout()
    return fig


def plots(rows: list[ScalingRow], results: list[Result], out: Path, unit: str = "sample") -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    series = scaling_series(rows)
    if series:
        for metric, name in (("speedup", "speedup.png"), ("efficiency", "efficiency.png")):
            fig = scaling_figure(series, metric, devices_word(results))
            fig.savefig(out / name, dpi=120)
            plt.close(fig)
            written.append(name)
    tele = [r for r in results if r.telemetry.available]
    if tele:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        labels = [f"{label_of(r)} n={r.world_size}" for r in tele]
        ax.bar(labels, [r.telemetry.energy_per_sample_j or 0 for r in tele])
        ax.set_ylabel(f"GPU energy per sample (J/{unit})")
        ax.tick_params(axis="x", rotation=45)
        fig.tight_layout()
        fig.savefig(out / "energy_per_sample.png", dpi=120)
        plt.close(fig)
        written.append("energy_per_sample.png")
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for run in tele:
            csv_name = run.telemetry.samples_csv
            samples = Path(run.file).parent / csv_name if run.file and csv_name else None
            if samples is not None and samples.is_file():
                with open(samples) as f:
                    rows_ = [x for x in csv.DictReader(f) if x["power_w"]]
                if rows_:
                    t0 = float(rows_[0]["t"])
                    ax.plot([float(x["t"]) - t0 for x in rows_], [float(x["power_w"]) for x in rows_], lw=1,
                            label=f"{label_of(run)} n={run.world_size} gpu {rows_[0]['gpu']}")
        ax.set_xlabel("time since the sampler started (s)")
        ax.set_ylabel("GPU power (W)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "telemetry_power.png", dpi=120)
        plt.close(fig)
        written.append("telemetry_power.png")
    return written


def environment_text(results: list[Result]) -> list[str]:
    envs = [r.environment for r in results]
    first = envs[0]
    hosts = sorted({host for r in results for host in r.hosts})
    usable = first.usable_cores  # older records have no such field
    cores = f"{first.cpu_count} cores" + (f", {usable} the run could use" if usable not in (None, first.cpu_count)
                                          else "")
    lines = [f"- hosts: {', '.join(hosts)}", f"- CPU: {first.cpu} ({cores})",
             f"- Python {first.python}, MPI: {first.mpi}, container: {first.container}"]
    for name in ("torch", "tensorflow", "horovod"):
        versions = sorted({v for e in envs if (v := e.versions(name)) is not None})
        if versions:
            lines.append(f"- {name}: {', '.join(versions)}")
    gpus = sorted({g.get("name") for e in envs for g in (e.nvml or {}).get("gpus", [])})
    lines.append(f"- GPUs: {', '.join(gpus) if gpus else 'none (CPU runs)'}")
    return lines


@dataclass(frozen=True)
class ReportConfig:
    """bench report's configuration: each option declared once, here (the command's flags come from it)."""
    paths: list[str] | None = option(None, "Sweep folders or result files.", argument=True)
    output: str | None = option(None, "Where report.md, report.csv and the plots go (default: the first folder).",
                                aliases=("--out",))
    strict: bool = option(False, STRICT_HELP, flag="--strict")
    html: bool = option(False, "Also write report.html: the report as one self-contained page (its plots inside it), "
                        "to open in a browser or send as one file.", flag="--html")

    def __post_init__(self) -> None:
        if not self.paths:
            raise BenchError("bench report takes sweep folders or result files: bench report PATH...")


def main(cfg: ReportConfig) -> None:
    """Write report.md, report.csv and plots from results (never re-runs anything)."""
    first = Path(cfg.paths[0])
    target = Path(cfg.output) if cfg.output else (first if first.is_dir() else first.parent)
    path = write_report([Path(p) for p in cfg.paths], target, cfg.strict)
    print(f"report: {path}")
    if cfg.html:
        page = path.with_suffix(".html")
        files.replace(page, html_page(path.read_text(), path.parent))
        print(f"report: {page}")


STYLE = """body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1500px;margin:2em auto;
padding:0 1em;color:#1b1f24}h1,h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em}
table{border-collapse:collapse;margin:1em 0;font-size:13px;display:block;overflow-x:auto}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;white-space:nowrap;font-variant-numeric:tabular-nums}
th{background:#f3f5f7}tr:nth-child(even){background:#fafbfc}
img{max-width:100%;border:1px solid #d0d7de;margin:.5em 0}code{background:#f3f5f7;padding:1px 4px}"""


def html_page(markdown: str, folder: Path) -> str:
    """The report's Markdown as one HTML page with nothing outside it: each plot it names (a PNG beside it) put in
    the page as a data URI, the tables styled, no script, no font or style fetched from anywhere. Raw HTML in the
    Markdown (a dataset path, a host name or a skipped file's reason can hold any text) is shown as text, never
    passed into the page: markdown-it's commonmark preset would pass it (html=True), so it is turned off."""
    import base64
    import html
    import re

    from markdown_it import MarkdownIt  # rich's own Markdown parser: installed wherever bench is

    def inline(match: re.Match) -> str:
        alt, name = match.group(1), match.group(2)
        image = folder / name
        if "/" in name or not image.is_file():
            return match.group(0)
        return f"![{alt}](data:image/png;base64,{base64.b64encode(image.read_bytes()).decode()})"

    parser = MarkdownIt("commonmark", {"html": False}).enable("table")
    body = parser.render(re.sub(r"!\[([^\]]*)\]\(([^)\s]+\.png)\)", inline, markdown))
    title = next((line[2:] for line in markdown.splitlines() if line.startswith("# ")), "hvdbench report")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style></head>'
            f"<body>\n{body}</body></html>\n")


def reference_rows(chosen: dict) -> list[ReferenceRow]:
    """Each chosen result that has a reference (bench.records.references.standing), in the cells' order."""
    rows = []
    extra = references.user_references()
    for key, by_n in chosen.items():
        for n, r in sorted(by_n.items()):
            found = references.standing(r, extra)
            if found is not None:
                rows.append(ReferenceRow(label=key.label, setting=key.setting_text(), n=n, share=found[0],
                                         reference=found[1], rate=r.summary.samples_per_sec_per_gpu))
    return rows


def write_report(paths: list[Path], out: Path, strict: bool = False) -> Path:
    skipped: list[tuple[Path, str]] | None = None if strict else []
    results = load_results(paths, skipped)
    out.mkdir(parents=True, exist_ok=True)
    chosen, repeats = table_cells(results)
    rows = scaling_rows(chosen, repeats)
    versus = horovod_vs_native(chosen, repeats)
    units = sorted({sample_symbol(r) for r in results})
    unit = units[0] if len(units) == 1 else "sample"  # e.g. img; mixed workloads are counted in samples
    images = plots(rows, results, out, unit)

    dev = devices_word(results)
    md = ["# hvdbench report", "",
          f"{len(results)} results from {', '.join(map(str, paths))}. {headline_sentence(unit)} Per {dev} = T / n. "
          "Every figure below is read from the result files.", "",
          "Formulas: speedup S_n = T_n / T_1 (same mode, model, precision, batch, image size); efficiency "
          "E_n = T_n / (n T_1); wall speedup = W_n / W_1 with W = samples after init / (init_s + train_s); "
          "vs single = T_n / T of torch-single or tf-single in the same setting.", "",
          f"## Scaling (the Horovod paper's table: 1 {dev}, n {dev}s, speedup)", "",
          "The interval within run is from this launch's timed windows; between runs, from the cell's repeated "
          "launches (what run-to-run noise is judged by; only with two or more runs).", "",
          f"| mode | setting | n | {unit}/s total | {unit}/s per {dev} | 95% CI within run | 95% CI between runs "
          "| speedup | efficiency | wall speedup | vs single | init s |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ci = r.ci95
        within = f"{ci[0]:.2f}–{_fmt(ci[1], none='∞')}" if ci else "–"  # no upper bound: unbounded above
        between = (f"{r.between_ci95_low:.2f}–{r.between_ci95_high:.2f} ({r.between_runs} runs)"
                   if r.between_ci95_low is not None else "–")
        extras = f", {r.extras}" if r.extras else ""
        md.append(f"| {r.label} | {r.model} {r.inputs} b{r.batch_size} {r.precision}{extras} | {r.n} "
                  f"| {r.samples_per_sec_total:.2f} | {r.samples_per_sec_per_gpu:.2f} | "
                  f"{within} | {between} | {_fmt(r.speedup)} | "
                  f"{_fmt(r.efficiency, '.0%')} | {_fmt(r.wall_speedup)} | {_fmt(r.vs_single)} | "
                  f"{r.init_s:.1f} |")
    warned = warning_lines(results)
    if warned:
        md += ["", "What the runs warned of (their figures may not mean what the table says):", "", *warned]
    md += paper_and_tuned_section(rows, unit, dev)
    md += ["", "## Horovod vs native", ""]
    if versus:
        md += [f"| setting | n | Horovod | {unit}/s | native | {unit}/s | Horovod / native | faster | "
               "beyond run-to-run noise |", "|---|---|---|---|---|---|---|---|---|"]
        for v in versus:
            runs = f"{v.runs[0]} and {v.runs[1]} runs"
            beyond = {True: f"yes ({runs})", False: f"undecided: between-run 95% intervals overlap ({runs})",
                      None: f"undecided: {runs}; needs 2+ each"}[v.beyond_noise]
            md.append(f"| {v.setting} | {v.n} | {v.horovod} | {v.horovod_samples_per_sec:.2f} | "
                      f"{v.native} | {v.native_samples_per_sec:.2f} | {v.ratio:.3f} | "
                      f"{v.faster} by {v.by_pct:.1f}% | {beyond} |")
    else:
        md.append("No Horovod/native pair in the same setting.")
    moved = traffic_rows(results)
    if moved:
        md += ["", "## Bytes moved per step (the Parallax study: allreduce, allgather, parameter server, hybrid)", "",
               "Computed from the shapes (bench.measure.traffic: ring allreduce 2(n-1) D, allgather n(n-1) S, "
               "parameter server n (pull + push), hybrid (n-1) r (i + 8d) + 2(n-1) D) and measured by the "
               "hosts' interface counters over the timed windows.", "",
               "| mode | setting | n | exchange | tokens/s total | computed MB/step | measured MB/step "
               "| measured / computed |", "|---|---|---|---|---|---|---|---|"]
        for r in moved:
            md.append(f"| {r.label} | {r.setting} | {r.n} | {r.exchange} | {_fmt(r.tokens_per_sec, '.0f')} "
                      f"| {r.computed / 1e6:.2f} | {_fmt(r.measured and r.measured / 1e6)} "
                      f"| {'not comparable (NCCL)' if r.not_comparable else _fmt(r.ratio, '.3f')} |")
    attributed = attribution_rows(chosen)
    if attributed:
        md += ["", "## Where each rank's step goes", "",
               "Per rank, ms per step (bench.measure.attribution): compute with the gradient exchange skipped, "
               "the exchange alone, the timed step, exposed = step - compute - data wait (in or waiting for the "
               "exchange), and the share of the exchange hidden under compute. A straggler is named when its "
               f"compute is more than {STRAGGLER_THRESHOLD:.0%} slower than the other ranks' median.", "",
               "| mode | setting | n | rank | host | compute | exchange alone | step | exposed | hidden | data wait "
               "| note |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for a in attributed:
            if a.rank is None:
                md.append(f"| {a.label} | {a.setting} | {a.n} | – | – | – | – | – | – | – | – | {a.note} |")
                continue
            md.append(f"| {a.label} | {a.setting} | {a.n} | {a.rank} | {a.host} "
                      f"| {1000 * a.compute_s:.1f} | {1000 * a.exchange_s:.1f} | {1000 * a.step_s:.1f} "
                      f"| {1000 * a.exposed_s:.1f} | {_fmt(a.hidden_share, '.0%')} "
                      f"| {_fmt(a.data_wait_s and 1000 * a.data_wait_s, '.1f')} | {a.note} |")
    fed = input_rows(results)
    if fed:
        md += ["", "## What the data costs", "",
               "Runs that read a dataset (--data, docs/data.md) against the synthetic runs of the same cell in this "
               "folder: input cost = 1 - data / synthetic; the largest share of a rank's timed time its steps "
               "waited for data; the slowest rank's pipeline alone.", "",
               "| mode | setting | n | data /s | synthetic /s | input cost | max wait share | loader alone /s | "
               "paced by |", "|---|---|---|---|---|---|---|---|---|"]
        for f in fed:
            md.append(f"| {f.label} | {f.setting} | {f.n} | {f.data:.2f} | {_fmt(f.synthetic)} "
                      f"| {_fmt(f.cost, '.1%')} | {_fmt(f.wait_share_max, '.1%')} "
                      f"| {_fmt(f.loader_rate, '.0f')} | {f.paced_by or '–'} |")
    if converge.trained_to_target(results):  # bench converge's table and curves, for any folder that has them
        record = converge.analyse(results)
        md += ["", "## Training to a target", "", *converge.markdown(record)]
        images.append(converge.plot(record, out / "accuracy.png").name)
    against = reference_rows(chosen)
    if against:
        md += ["", "## Against the references", "",
               "Each cell's newest run that has a matching reference (synthetic data, the same GPU, mode, model, "
               "precision, batch, image size, layout and tuning: bench.records.references, this project's own GPU "
               "figures first, then the published ones, and yours through HVDBENCH_REFERENCES): its samples/s per "
               "GPU as a share of the reference's.", "",
               "| mode | setting | n | per GPU /s | reference /s | share | reference |",
               "|---|---|---|---|---|---|---|"]
        md += [f"| {a.label} | {a.setting} | {a.n} | {a.rate:.1f} | {a.reference.per_device:.1f} "
               f"| {a.share:.0%} | {a.reference.label()} |" for a in against]
    tele = [r for r in results if r.telemetry.available]
    if tele:
        md += ["", "## Energy", "", f"| mode | n | J/{unit} | {unit}/s per W | mean GPU power W | throttled |",
               "|---|---|---|---|---|---|"]
        for run in tele:
            t = run.telemetry
            md.append(f"| {label_of(run)} | {run.world_size} | {_fmt(t.energy_per_sample_j, '.3f')} | "
                      f"{_fmt(t.samples_per_sec_per_watt, '.3f')} | "
                      f"{_fmt(t.power_w_mean_total, '.0f')} | {'yes' if t.throttled else 'no'} |")
    measured = measurement_lines(results)
    if measured:
        md += ["", "## Other measurements", "", "Each run's sections from the trackers registered beside bench's own "
               "(HVDBENCH_PLUGINS, bench.measure.tracker), as the run's table shows them.", "",
               "| mode | setting | n | measurement | value | unit |", "|---|---|---|---|---|---|", *measured]
    if images:
        md += ["", "## Plots", ""] + [f"![{name}]({name})" for name in images]
    n_repeats = sum(len(v) for v in repeats.values())
    if n_repeats:
        md += ["", f"{n_repeats} older repeat(s) of a cell were not used (the newest result per cell is)."]
    md += ["", "## Environment", ""] + environment_text(results) + [""]
    if skipped:
        md += ["## Files not read", "", f"{len(skipped)} file(s) in the folder(s) are not results this report "
               "could read (bench report --strict refuses them instead):", ""]
        md += [f"- {reason}" for _, reason in skipped] + [""]
    path = out / "report.md"
    files.replace(path, "\n".join(md))
    table = io.StringIO()
    columns = [f.name for f in fields(ScalingRow) if f.name != "ci95"]
    writer = csv.DictWriter(table, fieldnames=[*columns, "ci95_low", "ci95_high"])
    writer.writeheader()
    for r in rows:
        ci = r.ci95 or [None, None]
        writer.writerow({**{k: getattr(r, k) for k in columns}, "ci95_low": ci[0], "ci95_high": ci[1]})
    files.replace(out / "report.csv", table.getvalue())
    return path
