"""Per-rank attribution on this machine: each mode at np 2, without and with a straggler made on purpose.

    python -m tools.benchmarks.attribution_study [--modes torch-ddp,torch-horovod,tf-horovod] [--factor 2] [--repeats 1]
                                           [--attribution-steps N] [--cost] [-- more bench arguments]

For every mode it runs bench twice per repeat, alternated: plain, and with rank 1 slowed by --factor
(HVDBENCH_HOOKS, bench.hooks). It prints one row per run and rank: compute, exchange alone, step and exposed
(ms per step), hidden share, the straggler named (or none), and the attribution's cost: its wall time
(``attribution.cost_s``) against the rank's whole run (init + train + attribution). Defaults are the CPU
profile's (VGG-16, 64x64, batch 8, 5 windows of 4 steps, so 3 attribution steps of each kind).

With --cost it measures what the attribution adds to a run as a user sees it instead: each mode run with the
default (or the given) attribution steps and with ``--attribution-steps 0``, alternated --repeats times, and the
whole command's wall time (launch, imports, training, results); the table has the medians, the share added
(median with / median without - 1) and the attribution's own ``cost_s``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.records.schema import Result
from tools.benchmarks import new_result, results_in


def run(mode: str, extra: list[str], out: Path, slow: tuple[int, float] | None) -> Result:
    env = dict(os.environ)
    if slow is not None:
        env["HVDBENCH_HOOKS"] = json.dumps({"slow_rank": slow[0], "slow_factor": slow[1]})
    before = results_in(out)
    subprocess.run([sys.executable, "-m", "bench", mode, "--np", "2", "--output", str(out), *extra], check=True,
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return new_result(out, before)


def cost(modes: list[str], extra: list[str], repeats: int) -> Table:
    """What the attribution adds to each mode's whole command, with it and without it alternated."""
    table = Table("mode", "runs with (s)", "runs without (s)", "median with", "median without", "added",
                  "cost_s (median)", title=f"what the attribution adds to a run, np 2 ({' '.join(extra)})")
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            walls: dict[bool, list[float]] = {True: [], False: []}
            costs = []
            for repeat in range(repeats):
                for on in ((True, False) if repeat % 2 == 0 else (False, True)):
                    args = extra if on else [*extra, "--attribution-steps", "0"]
                    t0 = time.perf_counter()
                    r = run(mode, args, Path(tmp) / f"{mode}-{repeat}-{on}", None)
                    walls[on].append(time.perf_counter() - t0)
                    if on:
                        assert r.attribution is not None and r.attribution.cost_s is not None, mode
                        costs.append(r.attribution.cost_s)
            with_, without = statistics.median(walls[True]), statistics.median(walls[False])
            table.add_row(mode, ", ".join(f"{w:.1f}" for w in walls[True]),
                          ", ".join(f"{w:.1f}" for w in walls[False]), f"{with_:.1f}", f"{without:.1f}",
                          f"{with_ / without - 1:+.1%}", f"{statistics.median(costs):.2f}")
    return table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default="torch-ddp,torch-horovod,tf-horovod")
    p.add_argument("--factor", type=float, default=2.0, help="the slowed rank's compute x this")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--attribution-steps", type=int, default=None)
    p.add_argument("--cost", action="store_true", help="the whole command's wall time with and without it")
    p.add_argument("extra", nargs="*", help="more bench arguments (after --)")
    a = p.parse_args()
    extra = [*a.extra, "--no-telemetry"]
    if a.attribution_steps is not None:
        extra += ["--attribution-steps", str(a.attribution_steps)]
    if a.cost:
        Console(width=200).print(cost(a.modes.split(","), extra, a.repeats))
        return
    table = Table("mode", "fault", "rank", "compute ms", "exchange ms", "step ms", "exposed ms", "hidden",
                  "straggler", "cost s", "cost share", title=f"per-rank attribution, np 2 ({' '.join(extra)})")
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(a.repeats):
            for mode in a.modes.split(","):
                for slow in (None, (1, a.factor)):
                    r = run(mode, extra, Path(tmp) / f"{mode}-{repeat}-{bool(slow)}", slow)
                    section = r.attribution
                    fault = "none" if slow is None else f"rank 1 x{a.factor:g}"
                    if section is None or not section.measured:
                        why = "not run" if section is None else str(section.reason)
                        table.add_row(mode, fault, "-", "-", "-", "-", "-", "-", why, "-", "-")
                        continue
                    assert section.per_rank is not None and section.cost_s is not None, mode
                    s = section.straggler
                    named = "none" if s is None else f"rank {s.rank} x{s.slowdown:.2f}"
                    wall = {t["rank"]: t["init_s"] + t["train_s"] for t in r.timing.per_rank}
                    for q in section.per_rank:
                        hidden = "n/a" if q.hidden_share is None else f"{q.hidden_share:.0%}"
                        share = section.cost_s / (wall[q.rank] + section.cost_s)
                        table.add_row(mode, fault, str(q.rank), f"{1000 * q.compute_s:.0f}",
                                      f"{1000 * q.exchange_s:.0f}", f"{1000 * q.step_s:.0f}",
                                      f"{1000 * q.exposed_s:.0f}", hidden, named, f"{section.cost_s:.2f}",
                                      f"{share:.1%}")
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
