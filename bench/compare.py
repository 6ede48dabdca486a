"""bench compare A B: two results or two sweeps, metric by metric, cell by cell.

relative change = (B - A) / A. For throughput a drop is a regression; for times and energy a rise is.
A throughput change is called significant when the two runs' 95% confidence intervals do not overlap
(other metrics have one value per run, so no interval: shown as n/a). With ``--max-regression PCT`` the
command exits 1 when the chosen metric regressed by more than PCT percent in any cell (for CI use).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.errors import BenchError
from bench.report import ci_overlap, load_results, table_cells

# metric -> (where it lives, higher is better)
METRICS = {
    "images_per_sec_total": (("summary", "images_per_sec_total"), True),
    "images_per_sec_per_gpu": (("summary", "images_per_sec_per_gpu"), True),
    "images_per_sec_wall_total": (("summary", "images_per_sec_wall_total"), True),
    "init_s": (("timing", "init_s"), False),
    "first_step_s": (("timing", "first_step_s"), False),
    "energy_per_image_j": (("telemetry", "energy_per_image_j"), False),
}


def value(result: dict[str, Any], metric: str) -> float | None:
    (section, name), _ = METRICS[metric]
    return (result.get(section) or {}).get(name)


def compare(a: Path, b: Path) -> list[dict[str, Any]]:
    chosen_a, _ = table_cells(load_results([a]))
    chosen_b, _ = table_cells(load_results([b]))
    rows = []
    for key in sorted(set(chosen_a) & set(chosen_b), key=lambda k: (k.setting, k.label)):
        for n in sorted(set(chosen_a[key]) & set(chosen_b[key])):
            ra, rb = chosen_a[key][n], chosen_b[key][n]
            for metric, (_, higher_better) in METRICS.items():
                va, vb = value(ra, metric), value(rb, metric)
                if va is None or vb is None or va == 0:
                    continue
                change = (vb - va) / va
                overlap = ci_overlap(ra, rb) if metric == "images_per_sec_total" else None
                rows.append({"cell": f"{key.label} {key.setting_text()} n={n}", "metric": metric, "a": va, "b": vb,
                             "change": change, "regression": -change if higher_better else change,
                             "significant": None if overlap is None else not overlap})
    if not rows:
        raise BenchError(f"{a} and {b} share no cell (mode, model, precision, batch, image size, n) to compare")
    return rows


def regressions(rows: list[dict[str, Any]], metric: str, max_regression_pct: float) -> list[dict[str, Any]]:
    if metric not in METRICS:
        raise BenchError(f"unknown metric '{metric}' (choose from: {', '.join(METRICS)})")
    return [r for r in rows if r["metric"] == metric and r["regression"] * 100 > max_regression_pct]
