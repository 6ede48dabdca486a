"""Every mode at two ranks on one node of the container cluster, then across its two nodes.

    make cluster-up
    python -m tools.benchmarks.cluster_modes [--model vgg16 --image-size 32 --batch-size 8]

For each mode, two srun steps on the cluster's controller, the same run otherwise:

* one node:  ``srun -N1 -n2``: both ranks in one container, their gradients cross loopback;
* two nodes: ``srun -N2 -n2 --ntasks-per-node=1``: one rank per container, gradients cross the cluster's
  network (a Docker bridge: veth pairs through the host's kernel, no wire).

tf-native:ps runs two workers plus its chief and parameter server: ``-N1 -n4`` against
``-N2 -n4 --ntasks-per-node=2`` (chief and ps on node1, both workers on node2, so every update crosses).
MPI modes start through PMIx. Each rank keeps one thread (OMP_NUM_THREADS=1), so that both placements give
the ranks the same cores; the containers share this host's CPUs, so the difference between the columns is
the network path and what the library does over it, not the compute. The table gives total img/s (the
run's mean over its windows) and two nodes / one node. Raw results stay in results/cluster/modes-<stamp>/.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.modes import variant
from bench.records.results import load_result
from bench.records.schema import Result
from tools import cluster

MODES = ("torch-ddp", "torch-horovod", "tf-horovod", "tf-native", "tf-native:ps")
PLACEMENTS = {  # (one node, two nodes) srun options at two ranks; ps adds its chief and ps
    "ranks": ("-N1 -n2", "-N2 -n2 --ntasks-per-node=1"),
    "ps": ("-N1 -n4", "-N2 -n4 --ntasks-per-node=2"),
}


def run(label: str, placement: str, args: str, out: str) -> Result:
    mode, _, strategy = label.partition(":")
    mpi = "--mpi=pmix" if variant(label).mode.needs_mpi else ""
    flags = f"--strategy {strategy}" if strategy else ""
    done = cluster.run_on(f"OMP_NUM_THREADS=1 srun {placement} {mpi} --kill-on-bad-exit=1 bench {mode} {flags} "
                          f"{args} --output {out}", capture_output=True, text=True, errors="replace", timeout=900)
    files = sorted((cluster.shared_dir() / out).glob("*.json"))
    if done.returncode != 0 or len(files) != 1:
        lines = [x for x in (done.stdout + done.stderr).splitlines() if "error" in x.lower()] or ["no output"]
        raise SystemExit(f"cluster_modes: error: {label} ({placement}) exited {done.returncode}: {lines[-1]}")
    return load_result(files[0])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--model", default="vgg16")
    p.add_argument("--image-size", default="32")
    p.add_argument("--batch-size", default="8")
    p.add_argument("--windows", default="3")
    p.add_argument("--steps-per-window", default="3")
    p.add_argument("--repeats", type=int, default=1, help="runs of each placement; the table gives the median")
    a = p.parse_args()
    args = (f"--model {a.model} --image-size {a.image_size} --batch-size {a.batch_size} --warmup-steps 1 "
            f"--steps-per-window {a.steps_per_window} --windows {a.windows} --no-telemetry")
    folder = f"modes-{time.strftime('%Y%m%dT%H%M%S')}"
    rows = []
    for label in a.modes.split(","):
        placements = PLACEMENTS["ps" if label.endswith(":ps") else "ranks"]
        rates: tuple[list[float], list[float]] = ([], [])
        hosts: list[str] = []
        for repeat in range(a.repeats):
            for i, (placement, where) in enumerate(zip(placements, ("one-node", "two-nodes"), strict=True)):
                result = run(label, placement, args, f"{folder}/{label.replace(':', '-')}-{where}-{repeat}")
                rates[i].append(result.summary.samples_per_sec_total)
                if repeat == 0:
                    hosts.append(",".join(result.hosts))
            print(f"{label} run {repeat + 1}: one node {rates[0][-1]:.2f} img/s ({hosts[0]}), two nodes "
                  f"{rates[1][-1]:.2f} img/s ({hosts[1]})", flush=True)
        x1, x2 = statistics.median(rates[0]), statistics.median(rates[1])
        rows.append((label, x1, hosts[0], x2, hosts[1], x2 / x1))
    print(f"\n{a.model} {a.image_size}x{a.image_size}, batch {a.batch_size} per rank, 2 ranks, one thread per rank; "
          f"median of {a.repeats} run(s); results/cluster/{folder}\n")
    print("| mode | one node (img/s) | hosts | two nodes (img/s) | hosts | two / one |")
    print("|---|---|---|---|---|---|")
    for label, x1, h1, x2, h2, ratio in rows:
        print(f"| {label} | {x1:.2f} | {h1} | {x2:.2f} | {h2} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
