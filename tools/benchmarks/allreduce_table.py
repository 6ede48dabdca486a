"""One table of busbw by message size, a column per backend, from `bench allreduce` result files.

    python -m tools.benchmarks.allreduce_table results/allreduce-cpu [more files or folders] [--markdown]

Each cell is busbw in GB/s (nccl-tests' definition, as the results store it). Nothing is re-measured.
"""

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.commands.allreduce import human_bytes, load
from bench.records.kinds import AllreduceRow


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    a = ap.parse_args()
    files = [f for p in a.paths for f in (sorted(p.glob("*allreduce*.json")) if p.is_dir() else [p])]
    if not files:
        sys.exit(f"error: no bench allreduce results in {', '.join(map(str, a.paths))}")
    results = [load(f) for f in files]
    columns = [f"{r.config['backend']} ({r.environment.get('transport', '?')}, n={r.world_size})" for r in results]
    by_size: dict[int, dict[int, AllreduceRow]] = {}
    for i, r in enumerate(results):
        for row in r.rows:
            by_size.setdefault(row.bytes, {})[i] = row
    header = ["size", "model gradient", *[f"{c} busbw GB/s" for c in columns]]
    lines = []
    for size in sorted(by_size):
        cells = by_size[size]
        model = next((row.model for row in cells.values() if row.model), "")
        lines.append([human_bytes(size), model, *[f"{cells[i].busbw_GBps:.3f}" if i in cells else "–"
                                                  for i in range(len(results))]])
    if a.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for line in lines:
            print("| " + " | ".join(line) + " |")
        return
    table = Table(*header, title="bench allreduce: busbw by message size")
    for line in lines:
        table.add_row(*line)
    Console().print(table)


if __name__ == "__main__":
    main()
