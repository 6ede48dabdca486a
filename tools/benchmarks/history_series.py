"""bench history check on synthetic 90-day histories: the day a 5% step is found, and the false alarms per 90 days.

    python -m tools.benchmarks.history_series [--days 90] [--step-day 60] [--step 0.05] [--nodes 8]
                                              [--noise 0.01,0.02,0.03] [--series 100] [--seed 0]
                                              [--warning 5] [--error 10] [--last 10]

A fleet of --nodes nodes with the same GPU model runs one cell once a day. Each day's figure is the node's own
level times (1 + e), e drawn from a normal distribution of standard deviation --noise (the run-to-run spread: about
1% for a GPU run of a few minutes, 5-10% for this project's short CPU runs on a shared 2-core machine); the nodes'
levels differ by up to 2%, as nodes of one model do. On --step-day one node's level drops by --step (a driver or
firmware change) and stays there. Every day after the runs, bench history check runs over the database as it
stands that day (bench.records.history.check; by default with bench history check's defaults: warning 5%, error
10%, the last 10 runs), as an operator's cron job would.

Per noise level, over --series independent histories: the day the stepped node is first found (by its own past,
or by the fleet), as days after the step (median, and the share found within 3 and 10 days); the false alarms,
findings on a day and node where nothing changed (any other node on any day, the stepped node before its step),
per 90 days of one node, warnings and errors apart; and how often the step was never found.
"""

from __future__ import annotations

import argparse
import random
import statistics
from datetime import datetime, timedelta, timezone

from rich.console import Console
from rich.table import Table

from bench.records.history import Limits, Row, check

START = datetime(2026, 1, 1, 2, 0, tzinfo=timezone.utc)
CELL = "torch-ddp resnet50 224x224, batch 64/device, fp32, n=8"


def history(days: int, step_day: int, step: float, nodes: int, noise: float, rng: random.Random) -> list[list[Row]]:
    """Each day's rows: node 0 is the one stepped down on ``step_day``."""
    levels = [1000 * (1 + rng.uniform(-0.01, 0.01)) for _ in range(nodes)]
    out = []
    for day in range(days):
        rows = []
        for n, level in enumerate(levels):
            if n == 0 and day >= step_day:
                level *= 1 - step
            figure = level * (1 + rng.gauss(0, noise))
            rows.append(Row(digest=f"{day}-{n}-{rng.random()}", kind="result", time=START + timedelta(days=day),
                            status="ok", node=f"gpu{n:02d}", gpu_model="NVIDIA H100 80GB HBM3", cell=CELL,
                            headline=figure, unit="img/s", path=f"/results/{day}-{n}.json"))
        out.append(rows)
    return out


def one_series(args, noise: float, rng: random.Random) -> dict:
    days = history(args.days, args.step_day, args.step, args.nodes, noise, rng)
    rows: list[Row] = []
    found_day, alarms = None, {"warning": 0, "error": 0}
    limits = Limits(warning=args.warning / 100, error=args.error / 100, last=args.last)
    for day, today in enumerate(days):
        rows += today
        now = START + timedelta(days=day, hours=1)
        for finding in check(rows, now, limits):
            stepped = finding.where == "gpu00" and day >= args.step_day
            if stepped:
                found_day = day if found_day is None else found_day
            else:
                alarms[finding.severity] += 1
    return {"delay": None if found_day is None else found_day - args.step_day, **alarms}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--days", type=int, default=90)
    p.add_argument("--step-day", type=int, default=60)
    p.add_argument("--step", type=float, default=0.05)
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--noise", default="0.01,0.02,0.03")
    p.add_argument("--series", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warning", type=float, default=5.0, help="as bench history check's --warning (percent)")
    p.add_argument("--error", type=float, default=10.0, help="as bench history check's --error (percent)")
    p.add_argument("--last", type=int, default=10, help="as bench history check's --last")
    args = p.parse_args()
    table = Table("noise (sd)", "found: median days after the step", "within 3 days", "within 10 days", "never found",
                  "false warnings / node / 90 d", "false errors / node / 90 d",
                  title=f"bench history check, {args.series} synthetic histories each: {args.nodes} nodes, "
                        f"{args.days} days, one node {args.step:.0%} lower from day {args.step_day}; warning "
                        f"{args.warning:g}%, error {args.error:g}%, last {args.last}")
    node_days = args.nodes * args.days - (args.days - args.step_day)  # the days and nodes where nothing changed
    for noise in (float(x) for x in args.noise.split(",")):
        rng = random.Random(f"{args.seed}-{noise}")
        runs = [one_series(args, noise, rng) for _ in range(args.series)]
        delays = [r["delay"] for r in runs if r["delay"] is not None]
        per = 90 / node_days
        within = [f"{sum(d <= n for d in delays) / len(runs):.0%}" for n in (3, 10)]
        table.add_row(f"{noise:.0%}", f"{statistics.median(delays):g}" if delays else "-", *within,
                      f"{(len(runs) - len(delays)) / len(runs):.0%}",
                      f"{statistics.mean(r['warning'] for r in runs) * per:.2f}",
                      f"{statistics.mean(r['error'] for r in runs) * per:.2f}")
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
