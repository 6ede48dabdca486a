"""How far bench diagnose's thresholds are from this cluster's noise: healthy diagnoses, one after another.

    make cluster-up CLUSTER_NODES=4 CLUSTER_CPUS=0.4
    python -m tools.benchmarks.diagnose_noise --runs 4 [--run-args '...'] [--rules FILE]

Runs `salloc -N<nodes> bench diagnose` --runs times on the cluster of containers (one thread per rank), the
first saving a baseline that the others are held against, and prints, for every rule, the worst ratio any
healthy member reached (figure / expected: against its peers' median in the same run, or against the first
run's figure for the baseline rules) beside the rule's limit, and every finding (each one a false alarm: the
cluster is healthy). Also each run's wall time per phase. The records stay in results/cluster/<folder>/.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.commands.diagnose import rules as R
from bench.records import store
from bench.records.schema import Diagnose
from tools import cluster


def ratios(rule: R.Rule, figures: dict, baseline: dict | None) -> list[float]:
    members = {m: f[rule.figure] for m, f in figures.get(rule.kind, {}).items() if f.get(rule.figure) is not None}
    out = []
    for member, value in members.items():
        if rule.against == "peers":
            others = [v for m, v in members.items() if m != member]
            if len(others) >= 2:
                out.append(value / statistics.median(others))
        elif baseline and member in baseline.get(rule.kind, {}):
            out.append(value / baseline[rule.kind][member][rule.figure])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--run-args", default="--model resnet50 --image-size 32 --batch-size 8 --num-classes 10")
    p.add_argument("--rules", default=None)
    a = p.parse_args()
    nodes = len(cluster.shape()[0])
    folder = f"diagnose-noise-{time.strftime('%Y%m%dT%H%M%S')}"
    baseline = f"/shared/{folder}/baseline.json"
    records = []
    for i in range(a.runs):
        extra = f"--save-baseline {baseline}" if i == 0 else f"--baseline {baseline}"
        rules = f"--rules {a.rules}" if a.rules else ""
        done = cluster.run_on(f"mkdir -p {folder} && OMP_NUM_THREADS=1 salloc -N{nodes} bench diagnose --run-args "
                              f"'{a.run_args}' --large-bytes 16M --output {folder}/run{i} {extra} {rules}",
                              capture_output=True, text=True, errors="replace")
        found = list((cluster.shared_dir() / folder / f"run{i}").glob("diagnose-*/diagnose.json"))
        if not found:
            raise SystemExit(f"diagnose_noise: run {i} wrote no record: {(done.stdout + done.stderr)[-800:]}")
        records.append(store.load(found[0], Diagnose))
        print(f"run {i}: exit {done.returncode}, " + ", ".join(f"{k} {v.seconds:.0f} s"
                                                              for k, v in records[-1].phases.items()), flush=True)
    first = records[0].figures
    print(f"\n| rule | limit | worst healthy ratio (min - max over {a.runs} runs of {nodes} nodes) | margin |")
    print("|---|---|---|---|")
    for rule in R.load(a.rules):
        seen = [x for i, r in enumerate(records) for x in ratios(rule, r.figures, first if i else None)]
        if not seen:
            continue
        limit = 1 - rule.tolerance if rule.direction == "below" else 1 + rule.tolerance
        worst = min(seen) if rule.direction == "below" else max(seen)
        margin = worst - limit if rule.direction == "below" else limit - worst
        print(f"| {rule.name} | {limit:g} | {min(seen):.2f} - {max(seen):.2f} | {margin:+.2f} |")
    alarms = [(i, f.where, f.rule) for i, r in enumerate(records) for f in r.findings]
    print(f"\nfindings on the healthy cluster (false alarms): {len(alarms)}")
    for i, where, rule in alarms:
        print(f"  run {i}: {where}: {rule}")
    print(f"records: {cluster.shared_dir() / folder}")


if __name__ == "__main__":
    main()
