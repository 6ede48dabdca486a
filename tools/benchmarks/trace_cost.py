"""What --trace costs: each mode at np 2, traced and untraced, alternated.

    python -m tools.benchmarks.trace_cost [--modes torch-ddp,torch-horovod,tf-horovod] [--steps 3] [--repeats 3]
                                          [-- more bench arguments]

Per mode, --repeats pairs of runs, in alternating order: with ``--trace --steps`` and without. The table has the
tracing's cost per step as the result gives it (bench.measure.trace: a traced step over the windows' step, the
median over the repeats), the whole command's wall time (launch, imports, training, the traced steps, the files
written) with and without (medians, and the share added), and the size of one run's trace files. Defaults are the
CPU profile's (VGG-16, 64x64, batch 8, 5 windows of 4 steps).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.measure.trace import Trace
from bench.records.results import load_result
from bench.records.schema import Result


def run(mode: str, extra: list[str], out: Path) -> tuple[float, Result]:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bench", mode, "--np", "2", "--output", str(out), *extra], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    (result,) = out.glob("*.json")
    return wall, load_result(result)


def traced(result: Result) -> Trace:
    """A traced run's trace section."""
    assert result.trace is not None, result.run_id
    return result.trace


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default="torch-ddp,torch-horovod,tf-horovod")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("extra", nargs="*", help="more bench arguments (after --)")
    a = p.parse_args()
    table = Table("mode", "cost per step (median)", "per-step costs", "wall traced (s)", "wall untraced (s)",
                  "added to the command", "files per run (MB)",
                  title=f"what --trace {a.steps} adds, np 2, {a.repeats} alternated pairs ({' '.join(a.extra)})")
    with tempfile.TemporaryDirectory() as tmp:
        for mode in a.modes.split(","):
            walls: dict[bool, list[float]] = {True: [], False: []}
            costs, sizes = [], []
            for repeat in range(a.repeats):
                for on in ((True, False) if repeat % 2 == 0 else (False, True)):
                    out = Path(tmp) / f"{mode}-{repeat}-{on}"
                    wall, result = run(mode, [*a.extra, *(["--trace", str(a.steps)] if on else [])], out)
                    walls[on].append(wall)
                    if on:
                        trace = traced(result)
                        costs.append(trace.cost)
                        sizes.append(sum(f.stat().st_size for f in (out / trace.folder).rglob("*") if f.is_file()))
            with_, without = statistics.median(walls[True]), statistics.median(walls[False])
            table.add_row(mode, f"{statistics.median(costs):+.1%}", ", ".join(f"{c:+.0%}" for c in costs),
                          f"{with_:.1f}", f"{without:.1f}", f"{with_ / without - 1:+.1%}",
                          f"{statistics.median(sizes) / 1e6:.1f}")
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
