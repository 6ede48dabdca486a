"""Per-rank attribution on this machine: each mode at np 2, without and with a straggler made on purpose.

    python benchmarks/attribution.py [--modes torch-ddp,torch-horovod,tf-horovod] [--factor 2] [--repeats 1]
                                     [--attribution-steps N] [-- more bench arguments]

For every mode it runs bench twice per repeat, alternated: plain, and with rank 1 slowed by --factor
(HVDBENCH_HOOKS, bench.hooks). It prints one row per run and rank: compute, exchange alone, step and exposed
(ms per step), hidden share, the straggler named (or none), and the attribution's cost: its wall time
(``attribution.cost_s``) against the rank's whole run (init + train + attribution). Defaults are the CPU
profile's (VGG-16, 64x64, batch 8, 5 windows of 4 steps, so one attribution step per window kind).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table


def run(mode: str, extra: list[str], out: Path, slow: tuple[int, float] | None) -> dict:
    env = dict(os.environ)
    if slow is not None:
        env["HVDBENCH_HOOKS"] = json.dumps({"slow_rank": slow[0], "slow_factor": slow[1]})
    before = set(out.glob("*.json"))
    subprocess.run([sys.executable, "-m", "bench", mode, "--np", "2", "--output", str(out), *extra], check=True,
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (new,) = set(out.glob("*.json")) - before
    return json.loads(new.read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default="torch-ddp,torch-horovod,tf-horovod")
    p.add_argument("--factor", type=float, default=2.0, help="the slowed rank's compute x this")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--attribution-steps", type=int, default=None)
    p.add_argument("extra", nargs="*", help="more bench arguments (after --)")
    a = p.parse_args()
    extra = [*a.extra, "--no-telemetry"]
    if a.attribution_steps is not None:
        extra += ["--attribution-steps", str(a.attribution_steps)]
    table = Table("mode", "fault", "rank", "compute ms", "exchange ms", "step ms", "exposed ms", "hidden",
                  "straggler", "cost s", "cost share", title=f"per-rank attribution, np 2 ({' '.join(extra)})")
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(a.repeats):
            for mode in a.modes.split(","):
                for slow in (None, (1, a.factor)):
                    r = run(mode, extra, Path(tmp) / f"{mode}-{repeat}-{bool(slow)}", slow)
                    section = r["attribution"]
                    fault = "none" if slow is None else f"rank 1 x{a.factor:g}"
                    if not section["measured"]:
                        table.add_row(mode, fault, "-", "-", "-", "-", "-", "-", section["reason"], "-", "-")
                        continue
                    s = section["straggler"]
                    named = "none" if s is None else f"rank {s['rank']} x{s['slowdown']:.2f}"
                    wall = {t["rank"]: t["init_s"] + t["train_s"] for t in r["timing"]["per_rank"]}
                    for q in section["per_rank"]:
                        hidden = "n/a" if q["hidden_share"] is None else f"{q['hidden_share']:.0%}"
                        share = section["cost_s"] / (wall[q["rank"]] + section["cost_s"])
                        table.add_row(mode, fault, str(q["rank"]), f"{1000 * q['compute_s']:.0f}",
                                      f"{1000 * q['exchange_s']:.0f}", f"{1000 * q['step_s']:.0f}",
                                      f"{1000 * q['exposed_s']:.0f}", hidden, named, f"{section['cost_s']:.2f}",
                                      f"{share:.1%}")
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
