"""bench converge: the same training to a target in several modes and world sizes, each repeated, then one table,
one plot and one verdict (docs/training.md).

The runs are a sweep (bench.commands.sweep: modes x --np x seeds, resumable, one process group per cell) of
ordinary ``--epochs E --target-accuracy A --all-epochs`` runs: every run trains all E epochs, evaluating
after each, so its time to the target is read from its curve (the first evaluation at or above A: the same time a
run that stopped there would have taken) and its final accuracy is at the same epoch E as every other run's.

Per configuration (mode, world size), over its R repeats (seeds 1..R)::

    time to target   the median of the repeats' time_to_target_s, a repeat that missed the target counted as
                     infinitely slow (so the median is "not reached" when half or more missed); min and max of
                     those that reached it. The median, not MLPerf's mean after dropping the fastest and slowest
                     run, because it needs no fixed repeat count and takes a missed run without a number for it.
    final top-1      the median of the repeats' held-out top-1 after epoch E; spread = max - min

Verdict: PASS when every run of every configuration reached the target with its ranks in sync (equal parameter
checksums), and every configuration's final top-1 is within ``--tolerance`` of the median over every
configuration; otherwise FAIL, with each reason. ``--fault skip-allreduce`` runs every distributed cell with the
gradient exchange skipped (bench verify's negative control): its ranks drift apart, and the verdict says so.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import files
from bench.commands.sweep import Manifest, SweepMatrix, run_sweep
from bench.config import check_declared, comma_list, int_list, option
from bench.errors import BenchError
from bench.hooks import FAULTS, Hooks
from bench.measure.goal import Training
from bench.records import store
from bench.records.collect import label_of, load_results
from bench.records.header import header, new_run_id
from bench.records.kinds import Converge, ConvergeCurve, ConvergeRow
from bench.records.schema import Result

DEFAULT_MODES = ("torch-ddp", "torch-horovod", "tf-horovod", "tf-native")
TOLERANCE = 0.02  # final top-1 of a configuration against the median of every configuration


@dataclass(frozen=True)
class ConvergeConfig:
    """bench converge's own options, declared once (the run options every cell gets come from RunConfig's
    declarations, as bench sweep passes them)."""
    modes: tuple[str, ...] = option(DEFAULT_MODES, "Comma-separated modes (mode:strategy picks a strategy).",
                                    parse=comma_list, shown=",".join(DEFAULT_MODES))
    nps: tuple[int, ...] = option((1, 2), "Comma-separated world sizes.", flag="--np", aliases=("-np",), parse=int_list,
                                  shown="1,2")
    repeats: int = option(3, "Runs of each configuration, at seeds 1..N.", minimum=1)
    model: str = option("resnet20", "The model every run trains.")
    batch_size: int | None = option(None, "Samples per device per step (default: the device's).", minimum=1)
    tolerance: float = option(TOLERANCE, "Largest allowed difference between a configuration's final top-1 and the "
                              "median over every configuration.", positive=True)
    output: str = option("results/converge", "The folder: every run's result, the sweep's manifest and logs, "
                         "the converge record, converge.md and converge.png.")
    fault: str | None = option(None, "Inject a bug into every distributed run to prove the check fails: "
                               "skip-allreduce.")
    cell_timeout: float | None = option(None, "Stop a run that takes longer than this many seconds.",
                                        positive=True, unit="seconds")
    common: dict[str, Any] = field(default_factory=dict)  # the run options every cell gets (bench.cli)

    def __post_init__(self) -> None:
        check_declared(self)
        if self.fault is not None and self.fault not in FAULTS:
            raise BenchError(f"unknown fault '{self.fault}' (choose from: {', '.join(FAULTS)})")
        missing = [flag for flag, name in (("--data PATH", "data"), ("--epochs E", "epochs"),
                                           ("--target-accuracy A", "target_accuracy"))
                   if self.common.get(name) is None]
        if missing:
            raise BenchError(f"bench converge needs {', '.join(missing)}: every run trains E epochs of the dataset "
                             "and is timed to the target A")
        if not self.modes or not self.nps:
            raise BenchError("bench converge needs one or more --modes and --np counts")

    def sweep(self) -> SweepMatrix:
        return SweepMatrix(modes=list(self.modes), nps=list(self.nps), models=[self.model],
                           batch_sizes=[self.batch_size], seeds=list(range(1, self.repeats + 1)),
                           common={**self.common, "stop_at_target": False})


def configuration(result: Result) -> tuple[str, int]:
    return label_of(result), result.world_size


def trained_to_target(results: list[Result]) -> list[tuple[Result, Training]]:
    """Each result that trained to a target, with its training section."""
    return [(r, r.training) for r in results if r.training is not None and r.training.target_accuracy is not None]


def analyse(results: list[Result], tolerance: float = TOLERANCE) -> Converge:
    """The table and the verdict from the results of training to a target (module docstring)."""
    runs: dict[tuple[str, int], list[tuple[Result, Training]]] = defaultdict(list)
    for r, training in trained_to_target(results):
        runs[configuration(r)].append((r, training))
    if not runs:
        raise BenchError("no run in the folder trained to a target (--epochs with --target-accuracy)")
    rows, reasons = [], []
    for (label, n), rs in sorted(runs.items()):
        times = [t.time_to_target_s for _, t in rs]
        reached = [t for t in times if t is not None]
        median_time = statistics.median([math.inf if t is None else t for t in times])
        finals = [t.final_top1 or 0.0 for _, t in rs]
        epochs = [t.epochs_to_target for _, t in rs if t.reached and t.epochs_to_target is not None]
        row = ConvergeRow(mode=label, np=n, repeats=len(rs), reached=len(reached),
                          time_to_target_s=None if math.isinf(median_time) else median_time,
                          time_min_s=min(reached, default=None), time_max_s=max(reached, default=None),
                          epochs_to_target=statistics.median(epochs) if epochs else None,
                          final_top1=statistics.median(finals), final_spread=max(finals) - min(finals),
                          epochs_run=max(t.epochs_run or 0 for _, t in rs),
                          in_sync=all(r.sync.ranks_in_sync for r, _ in rs),
                          init_s=statistics.median(r.timing.init_s for r, _ in rs),
                          results=[Path(r.file or r.run_id).name for r, _ in rs], final_vs_median=0.0)
        rows.append(row)
        if len(reached) < len(rs):
            reasons.append(f"{label} np {n}: {len(rs) - len(reached)} of {len(rs)} run(s) did not reach the target")
        if not row.in_sync:
            reasons.append(f"{label} np {n}: the ranks' parameters differ at the end (their gradients were not "
                           "averaged)")
    overall = statistics.median(r.final_top1 for r in rows)
    for row in rows:
        row.final_vs_median = row.final_top1 - overall
        if abs(row.final_vs_median) > tolerance:
            reasons.append(f"{row.mode} np {row.np}: final top-1 {row.final_top1:.4f} is "
                           f"{row.final_vs_median:+.4f} from the median {overall:.4f} (tolerance {tolerance})")
    epochs_run = sorted({row.epochs_run for row in rows})
    if len(epochs_run) > 1:
        reasons.append(f"the runs trained different numbers of epochs ({epochs_run}): final accuracies are not "
                       "at one epoch")
    targets = sorted({t.target_accuracy for rs in runs.values() for _, t in rs if t.target_accuracy is not None})
    if len(targets) > 1:
        reasons.append(f"the runs trained to different targets ({targets}): their times to target do not compare")
    return Converge(**header(new_run_id("converge"), store.Kind.CONVERGE), target_accuracy=targets[0],
                    tolerance=tolerance, median_final_top1=overall, rows=rows,
                    verdict="FAIL" if reasons else "PASS", reasons=reasons,
                    curves=[ConvergeCurve(mode=label, np=n, seed=r.config.seed, init_s=r.timing.init_s,
                                          points=[(c.wall_s, c.top1) for c in t.curve])
                            for (label, n), rs in sorted(runs.items()) for r, t in rs])


def _fmt(x, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def markdown(record: Converge) -> list[str]:
    """The convergence table, as converge.md and bench report write it."""
    md = [f"Target: held-out top-1 >= {record.target_accuracy}; time to target from the end of init (the "
          "median of the repeats; a missed target counts as infinitely slow); final top-1 after the last epoch, "
          f"held against the median over every configuration ({record.median_final_top1:.4f}) within "
          f"{record.tolerance}.", "",
          "| mode | np | reached | time to target s (min–max) | epochs to target | final top-1 (spread) | vs median "
          "| ranks in sync | init s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in record.rows:
        spread = f" ({_fmt(r.time_min_s, '.1f')}–{_fmt(r.time_max_s, '.1f')})" if r.time_min_s is not None else ""
        md.append(f"| {r.mode} | {r.np} | {r.reached}/{r.repeats} "
                  f"| {_fmt(r.time_to_target_s, '.1f')}{spread} | {_fmt(r.epochs_to_target, 'g')} "
                  f"| {r.final_top1:.4f} (±{r.final_spread / 2:.4f}) | {r.final_vs_median:+.4f} "
                  f"| {'yes' if r.in_sync else 'NO'} | {r.init_s:.1f} |")
    md += ["", f"Verdict: **{record.verdict}**"]
    md += [f"- {reason}" for reason in record.reasons]
    return md


def plot(record: Converge, path: Path) -> Path:
    """Held-out top-1 against wall time since init, one line per run, one colour per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    colours: dict[tuple[str, int], Any] = {}
    for curve in record.curves:
        key = (curve.mode, curve.np)
        xs, ys = zip(*curve.points, strict=True) if curve.points else ((), ())
        line, = ax.plot(xs, ys, marker=".", lw=1, color=colours.get(key),
                        label=None if key in colours else f"{key[0]} np {key[1]}")
        colours.setdefault(key, line.get_color())
    ax.axhline(record.target_accuracy, color="k", ls="--", lw=1, label=f"target {record.target_accuracy}")
    ax.set_xlabel("wall time since init (s)")
    ax.set_ylabel("held-out top-1")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def render(record: Converge):
    from rich.table import Table

    table = Table("mode", "np", "reached", "time to target s", "epochs", "final top-1", "vs median", "in sync",
                  title=f"bench converge: target top-1 {record.target_accuracy}, tolerance {record.tolerance}")
    for r in record.rows:
        table.add_row(r.mode, str(r.np), f"{r.reached}/{r.repeats}", _fmt(r.time_to_target_s, ".1f"),
                      _fmt(r.epochs_to_target, "g"), f"{r.final_top1:.4f}", f"{r.final_vs_median:+.4f}",
                      "yes" if r.in_sync else "NO")
    return table


def matrix_results(sweep: SweepMatrix, folder: Path) -> tuple[list[Path], list[str]]:
    """This matrix's results in ``folder`` (the manifest's entry of each of its cells, run with its options), and
    one reason for each cell that failed or has no result: failed, timed out, never run, or run with other
    options. A run found not valid (its ranks' parameters differ) failed with its result written: both count.
    Other files in the folder (an earlier matrix's, another target's) are not read."""
    cells = Manifest(folder, None).record.cells
    key = sweep.options_key()
    paths, failures = [], []
    for cell in sweep.cells():
        entry = cells.get(cell.id)
        if entry is None:
            failures.append(f"{cell.id}: no result (never run)")
            continue
        result = folder / str(entry.result)
        if entry.options == key and entry.result and result.is_file():
            paths.append(result)
            if entry.status != "ok":
                failures.append(f"{cell.id}: {entry.status} ({entry.error})")
        else:
            why = entry.error or (entry.status if entry.options in (None, key) else "run with other options")
            failures.append(f"{cell.id}: no result ({why})")
    return paths, failures


def summarise(folder: Path, tolerance: float, sweep: SweepMatrix | None = None) -> tuple[Converge, Path]:
    """Analyse the runs of ``sweep``'s matrix in ``folder`` (every result there when None: bench report's view);
    write the converge record, converge.md and converge.png beside them. A cell of the matrix without a result
    makes the verdict FAIL."""
    paths, failures = matrix_results(sweep, folder) if sweep is not None else ([folder], [])
    if not paths:
        raise BenchError(f"no run of this matrix left a result in {folder}: " + "; ".join(failures[:3]))
    record = analyse(load_results(paths, skipped=[]), tolerance)
    if failures:
        record.verdict, record.reasons = "FAIL", [*record.reasons, *failures]
    path = store.write(folder / f"{record.run_id}.json", record)
    files.replace(folder / "converge.md", "\n".join(["# bench converge", "", *markdown(record), ""]))
    plot(record, folder / "converge.png")
    return record, path


def main(cfg: ConvergeConfig) -> int:
    from rich.console import Console

    folder = Path(cfg.output)
    hooks = Hooks(fault=cfg.fault) if cfg.fault else None
    if hooks is not None:
        with hooks.exported():
            summary = run_sweep(cfg.sweep(), folder)
    else:
        summary = run_sweep(cfg.sweep(), folder)
    failed = summary.get("failed", 0) + summary.get("timed_out", 0)
    if hooks is not None:
        with hooks.exported():  # the options key holds the hooks the cells ran with
            record, path = summarise(folder, cfg.tolerance, cfg.sweep())
    else:
        record, path = summarise(folder, cfg.tolerance, cfg.sweep())
    console = Console()
    console.print(render(record))
    for reason in record.reasons:
        console.print(f"  - {reason}", highlight=False)
    print(f"converge: {record.verdict}; {path}, {folder / 'converge.md'}, {folder / 'converge.png'}"
          + (f"; {failed} run(s) failed: their logs are in {folder / 'logs'}" if failed else ""), file=sys.stdout)
    return 0 if record.verdict == "PASS" and not failed else 1
