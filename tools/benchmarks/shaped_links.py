"""Allreduce across the cluster's two nodes with each node's link capped by a token-bucket filter.

    make cluster-up
    python -m tools.benchmarks.shaped_links --rates 1gbit,3gbit,10gbit,none

For each cap, `tc qdisc replace dev eth0 root tbf rate R burst B latency 50ms` on node1 and node2 (egress;
burst B = 10 ms at the rate, 64 KiB at least; netem is not available on every kernel, tbf is), then
`srun -N2 -n2 bench allreduce` (one rank per node) and the table: busbw at the largest size against the
cap. At n = 2 a ring allreduce sends S bytes out of each node in time t, so busbw = S / t is the
link's rate and should approach the cap where the cap, not the CPU, is the limit. The filters are
removed afterwards, whatever happens. Raw results stay in results/cluster/shaped-<stamp>/<rate>/.

With --predict, each capped rate also gets a torch-ddp and torch-horovod sweep inside `salloc -N2` (np 1 on one
node, np 2 across both; VGG-16 and ResNet-50, one thread per rank so a rank keeps its speed as a GPU would; the
np 2 cells carry their per-rank attribution) and an allreduce measurement through each mode's backend that
includes both models' gradient sizes, and `bench predict --sweep --allreduce` (run here, on the shared folder)
prints measured against predicted efficiency three times: with the overlap assumed 0.5, assumed 0, and measured
(each mode's hidden share from its np 2 cell's attribution): the predictor checked on a network boundary of
known bandwidth.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from bench.records import store
from bench.records.kinds import Allreduce
from bench.records.schema import hosts_in
from tools import cluster

UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def bits_per_s(rate: str) -> float | None:
    if rate == "none":
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(kbit|mbit|gbit)", rate)
    if not m:
        raise SystemExit(f"shaped_links: error: rate '{rate}' is not like 1gbit, 500mbit or none")
    return float(m.group(1)) * UNITS[m.group(2)]


def shape(rate: str) -> None:
    bps = bits_per_s(rate)
    for node in cluster.NODES:
        if bps is None:
            cmd = "tc qdisc del dev eth0 root 2>/dev/null || true"
        else:
            burst = max(int(bps / 8 / 100), 65536)
            cmd = f"tc qdisc replace dev eth0 root tbf rate {rate} burst {burst} latency 50ms"
        done = cluster.run_on(cmd, node, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"shaped_links: error: {node}: {cmd}: {done.stderr.strip()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="1gbit,3gbit,10gbit,none")
    p.add_argument("--backend", default="torch")
    p.add_argument("--min-bytes", default="4M")
    p.add_argument("--max-bytes", default="64M")
    p.add_argument("--predict", action="store_true",
                   help="also sweep torch-ddp and torch-horovod at np 1 and 2 and check bench predict")
    a = p.parse_args()
    rates = a.rates.split(",")
    for rate in rates:
        bits_per_s(rate)
    folder = f"shaped-{time.strftime('%Y%m%dT%H%M%S')}"
    rows = []
    try:
        for rate in rates:
            shape(rate)
            out = f"{folder}/{rate}"
            done = cluster.run_on(
                f"srun -N2 -n2 --ntasks-per-node=1 bench allreduce --backend {a.backend} --min-bytes {a.min_bytes} "
                f"--max-bytes {a.max_bytes} --models '' --samples 5 --output {out}",
                capture_output=True, text=True, errors="replace")
            if done.returncode != 0:
                raise SystemExit(f"shaped_links: error: allreduce at {rate}: {done.stderr.strip()[-500:]}")
            found = list((cluster.shared_dir() / out).glob("*.json"))
            if len(found) != 1:
                raise SystemExit(f"shaped_links: error: no allreduce result under {cluster.shared_dir() / out}: the "
                                 "cluster's /shared is another checkout's (run make cluster-up from this one)")
            result = store.load(found[0], Allreduce)
            rows.append((rate, result.rows[-1], result))
            if a.predict and bits_per_s(rate):
                predict(folder, rate)
    finally:
        shape("none")
    print(f"| cap | size | busbw (GB/s) | cap (GB/s) | busbw / cap | hosts |   ({a.backend}, n=2, one rank per node)")
    print("|---|---|---|---|---|---|")
    for rate, row, result in rows:
        cap = bits_per_s(rate)
        hosts = " ".join(hosts_in(result.environment))
        ratio = f"{row.busbw_GBps / (cap / 8e9):.2f}" if cap else ""
        cap_text = f"{cap / 8e9:.3f}" if cap else "none"
        print(f"| {rate} | {row.bytes >> 20} MiB | {row.busbw_GBps:.3f} | {cap_text} | {ratio} | {hosts} |")
    print(f"raw results: {cluster.shared_dir() / folder}")


def predict(folder: str, rate: str) -> None:
    out = f"{folder}/{rate}-predict"
    done = cluster.run_on(
        " && ".join(f"srun {mpi} -N2 -n2 --ntasks-per-node=1 bench allreduce --backend {backend} --min-bytes 4K "
                    f"--max-bytes 64M --models resnet50,vgg16 --samples 3 --output {out}/allreduce-{backend}"
                    for backend, mpi in (("torch", ""), ("horovod-torch", "--mpi=pmix")))  # Horovod joins by PMIx
        + f" && OMP_NUM_THREADS=1 salloc -N2 --ntasks-per-node=1 bench sweep --modes torch-ddp,torch-horovod "
        f"--np 1,2 --models resnet50,vgg16 --image-size 64 --batch-sizes 4 --device cpu --warmup-steps 1 "
        f"--steps-per-window 2 --windows 2 --attribution-steps 3 --output {out}/sweep",
        capture_output=True, text=True, errors="replace")
    if done.returncode != 0:
        raise SystemExit(f"shaped_links: error: the sweep at {rate}: {(done.stdout + done.stderr)[-800:]}")
    shared = cluster.shared_dir() / out
    allreduces = [str(path) for path in sorted(shared.glob("allreduce-*/*.json"))]
    bench = Path(sys.executable).parent / "bench"
    for overlap in (["--overlap", "0.5"], ["--overlap", "0"], []):
        args = ["predict", "--sweep", str(shared / "sweep"), *[x for a in allreduces for x in ("--allreduce", a)],
                *overlap]
        print(f"\n{rate}: bench {' '.join(args)}", flush=True)
        subprocess.run([str(bench), *args], check=True, env={**os.environ, "COLUMNS": "220"})


if __name__ == "__main__":
    main()
