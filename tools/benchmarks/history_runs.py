"""bench history check on real runs: a node's history of one cell, then one run on the same node slowed down.

    python -m tools.benchmarks.history_runs [--runs 20] [--procs 1] [--last 10]

--runs runs of one cell (`bench torch-single`, ResNet-20 at 32 px, batch 16, 3 windows of 10 steps, the CPU), one
after another on this machine, each added to a database of its own (`bench history add`) and followed by
`bench history check`, as a cron job after each run would; then one more run of the same cell beside --procs busy
loops (tools/compete.py: a competing process at the same priority, as a neighbour's job on a shared node), added
and checked the same way. The table has each run's figure, the median of the node's runs before it (up to --last),
its drop from that median, and what bench history check said (its exit status and findings): the unchanged runs
should have no finding, the slowed one an error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[2]
CELL = ["torch-single", "--model", "resnet20", "--image-size", "32", "--batch-size", "16", "--num-classes", "10",
        "--warmup-steps", "2", "--steps-per-window", "10", "--windows", "3", "--device", "cpu", "--no-telemetry"]


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)


def bench(*args: str, procs: int = 0) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bench", *args]
    if procs:
        cmd = [sys.executable, "-m", "tools.compete", "--procs", str(procs), "--", *cmd]
    return run(cmd)


def newest_figure(folder: Path) -> float:
    newest = max(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
    record = json.loads(newest.read_text())
    if record.get("status") != "ok":
        sys.exit(f"the run failed: {record.get('error')}")
    return record["summary"]["samples_per_sec_total"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--procs", type=int, default=1)
    p.add_argument("--last", type=int, default=10)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hvdbench-history-runs-"))
    results, db = work / "results", f"sqlite:///{work / 'history.db'}"
    table = Table("run", "img/s", "median before", "drop", "check: exit", "findings",
                  title=f"bench torch-single, ResNet-20 32 px, batch 16, CPU: {args.runs} runs, then one beside "
                        f"{args.procs} busy loop(s); bench history check after each (warning 5%, error 10%, "
                        f"last {args.last})")
    figures: list[float] = []
    unchanged_findings = 0
    for i in range(args.runs + 1):
        slowed = i == args.runs
        done = bench(*CELL, "--output", str(results), procs=args.procs if slowed else 0)
        if done.returncode != 0:
            sys.exit(f"run {i + 1} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
        figure = newest_figure(results)
        added = bench("history", "add", str(results), "--db", db)
        if added.returncode != 0:
            sys.exit(f"bench history add failed: {added.stderr.strip()}")
        checked = bench("history", "check", "--db", db, "--last", str(args.last))
        found = re.search(r"history check: (\d+) error\(s\), (\d+) warning\(s\)", checked.stderr)
        if found is None:
            sys.exit(f"bench history check said no summary: {checked.stderr.strip()}")
        errors, warnings = int(found.group(1)), int(found.group(2))
        before = figures[-args.last:]
        median = statistics.median(before) if before else None
        table.add_row(f"{i + 1}{' (slowed)' if slowed else ''}", f"{figure:.1f}",
                      f"{median:.1f}" if median else "-", f"{1 - figure / median:+.1%}" if median else "-",
                      str(checked.returncode), f"{errors} error(s), {warnings} warning(s)")
        if not slowed:
            unchanged_findings += errors + warnings
        figures.append(figure)
    Console(width=160).print(table)
    print(f"findings on the {args.runs} unchanged runs: {unchanged_findings}; the run-to-run spread of their "
          f"figures: {statistics.stdev(figures[:-1]) / statistics.mean(figures[:-1]):.1%} (sd over mean)")


if __name__ == "__main__":
    main()
