"""bench compare A B: two results or two sweeps, metric by metric, cell by cell.

relative change = (B - A) / A. For throughput a drop is a regression; for times and energy a rise is.
A throughput change is called significant only from repeated runs: when each side has two or more runs of the
cell (on the same hosts) and the between-run 95% intervals of their mean throughput do not overlap
(bench.records.collect.significant). One run a side gives only within-run intervals, which leave out what changes
from launch to launch (NCCL's algorithm choice, cuDNN autotuning, clocks, heat): shown as n/a, with the number of
runs each side had; other metrics are n/a too. With ``--max-regression PCT`` the
command exits 1 when the chosen metric regressed by more than PCT percent in any cell (for CI use).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.errors import BenchError
from bench.records.collect import load_results, significant, table_cells
from bench.records.metrics import METRICS, find

# The metrics compared, from the registry (bench.records.metrics): throughput, start-up and energy.
COMPARED = ("samples_per_sec_total", "samples_per_sec_per_gpu", "samples_per_sec_wall_total", "tokens_per_sec_total",
            "model_tflops_per_gpu", "init_s", "first_step_s", "energy_per_sample_j")


def compare(a: Path, b: Path, strict: bool = False) -> list[dict[str, Any]]:
    """Cell by cell, metric by metric; files that are not results are skipped with a warning unless ``strict``."""
    chosen_a, repeats_a = table_cells(load_results([a], None if strict else []))
    chosen_b, repeats_b = table_cells(load_results([b], None if strict else []))
    rows = []
    for key in sorted(set(chosen_a) & set(chosen_b), key=lambda k: (k.setting, k.label)):
        for n in sorted(set(chosen_a[key]) & set(chosen_b[key])):
            ra, rb = chosen_a[key][n], chosen_b[key][n]
            runs_a, runs_b = [ra, *repeats_a[(key, n)]], [rb, *repeats_b[(key, n)]]
            for name in COMPARED:
                metric = METRICS[name]
                va, vb = metric.value(ra), metric.value(rb)
                if va is None or vb is None or va == 0:
                    continue
                change = (vb - va) / va
                headline = name == "samples_per_sec_total"
                rows.append({"cell": f"{key.label} {key.setting_text()} n={n}", "metric": name, "a": va, "b": vb,
                             "change": change, "regression": -change if metric.higher_is_better else change,
                             "significant": significant(runs_a, runs_b) if headline else None,
                             "runs": (len(runs_a), len(runs_b)) if headline else None})
    if not rows:
        raise BenchError(f"{a} and {b} share no cell (mode, model, precision, batch, image size, n) to compare")
    return rows


def regressions(rows: list[dict[str, Any]], metric: str, max_regression_pct: float) -> list[dict[str, Any]]:
    """Cells where ``metric`` (a registry name; schema-1 names are accepted) got worse by more than the percent."""
    key = find(metric).key
    return [r for r in rows if r["metric"] == key and r["regression"] * 100 > max_regression_pct]
