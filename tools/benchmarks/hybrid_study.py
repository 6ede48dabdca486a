"""The Parallax study's four architectures side by side, on the Transformer: tokens/s and bytes per step.

    python -m tools.benchmarks.hybrid_study [--repeats 3] [--vocabs 1000,37000] [--nps 1,2] [--cluster]

=================  =====================================  ==============================================
architecture       run                                    how the embedding's gradient crosses processes
=================  =====================================  ==============================================
allreduce          torch-horovod, the paper's tied model  densely, in the ring allreduce of everything
allgather          torch-horovod --sparse-embeddings      its rows, allgathered (Horovod's sparse path)
parameter server   tf-native --strategy ps                its rows, pushed to and pulled from the server
                   --sparse-embeddings
hybrid             torch-hybrid (TorchRec)                the table sharded row-wise: rows by all-to-all;
                                                          the rest allreduced (DDP)
=================  =====================================  ==============================================

Every (architecture, vocabulary, ranks) cell runs ``--repeats`` times, the cells alternated within each
repeat so that a slow minute of this shared machine falls on all of them. One core per rank
(OMP_NUM_THREADS=1), so that a rank computes as fast beside another as alone. The table gives tokens/s over
all ranks (median, and the range over the repeats) and bytes per step: measured by the hosts' interface
counters, and computed from the shapes (bench.measure.traffic). ``--cluster`` runs on the cluster of
containers (``make cluster-up``) instead: one rank per node through srun (np 1 on node1; np 2 across both
nodes; the parameter server's chief and server on node1, its workers on node2). Raw results stay under
results/hybrid-study-<stamp>/.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.records.results import load_result
from bench.records.schema import Result

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURES = {  # name -> (label, extra options)
    "allreduce": ("torch-horovod", []),
    "allgather": ("torch-horovod", ["--sparse-embeddings"]),
    "parameter server": ("tf-native:ps", ["--sparse-embeddings"]),
    "hybrid": ("torch-hybrid", []),
}
COMMON = ["--model", "transformer-small", "--batch-size", "8", "--seq-len", "32", "--warmup-steps", "2",
          "--steps-per-window", "4", "--windows", "4"]


def local_command(label: str, extra: list[str], vocab: int, np_: int, out: Path) -> list[str]:
    mode, _, strategy = label.partition(":")
    return [str(ROOT / ".venv" / "bin" / "bench"), mode, *(["--strategy", strategy] if strategy else []), *COMMON,
            *extra, "--num-classes", str(vocab), "--np", str(np_), "--output", str(out)]


def placement(label: str, np_: int) -> str:
    """srun's placement on the cluster: one rank per node; the parameter server's chief and server on node1
    and its workers on node2 (at np 1 everything on node1)."""
    from bench.modes import variant

    v = variant(label)
    tasks = v.processes(np_)
    if v.exchange == "ps":
        return f"-N2 -n{tasks} --ntasks-per-node={tasks - np_}" if np_ > 1 else f"-N1 -n{tasks}"
    return f"-N{np_} -n{np_} --ntasks-per-node=1"


def run_once(label: str, extra: list[str], vocab: int, np_: int, out: Path, on_cluster: bool) -> Result:
    if on_cluster:  # the srun step and its one result, as tools/benchmarks/cluster_modes.py runs them
        from tools.benchmarks import cluster_modes

        args = shlex.join([*COMMON, *extra, "--num-classes", str(vocab)])
        return cluster_modes.run(label, placement(label, np_), args, str(out))
    cmd = local_command(label, extra, vocab, np_, out)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=dict(os.environ, OMP_NUM_THREADS="1"))
    files = sorted(out.glob("*.json"))
    if done.returncode != 0 or len(files) != 1:
        lines = [x for x in (done.stdout + done.stderr).splitlines() if "error" in x.lower()] or ["no output"]
        raise SystemExit(f"hybrid_study: error: {' '.join(cmd)[:120]} exited {done.returncode}: {lines[-1]}")
    return load_result(files[0])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--vocabs", default="1000,37000")
    p.add_argument("--nps", default="1,2")
    p.add_argument("--architectures", default=",".join(ARCHITECTURES))
    p.add_argument("--cluster", action="store_true", help="on the cluster of containers (make cluster-up)")
    a = p.parse_args()
    stamp = time.strftime("%Y%m%dT%H%M%S")
    # on the cluster, paths are relative to its shared directory (the controller's working directory)
    base = Path(f"hybrid-study-{stamp}") if a.cluster else ROOT / "results" / f"hybrid-study-{stamp}"
    cells = [(arch, int(v), int(n)) for arch in a.architectures.split(",") for v in a.vocabs.split(",")
             for n in a.nps.split(",")]
    got: dict[tuple, list[Result]] = {c: [] for c in cells}
    for r in range(a.repeats):
        for arch, vocab, np_ in cells:
            label, extra = ARCHITECTURES[arch]
            out = base / f"{arch.replace(' ', '-')}-v{vocab}-n{np_}-r{r}"
            result = run_once(label, extra, vocab, np_, out, a.cluster)
            got[(arch, vocab, np_)].append(result)
            print(f"hybrid_study: {arch} vocab {vocab} np {np_} repeat {r + 1}: "
                  f"{result.summary.tokens_per_sec_total:.0f} tokens/s", file=sys.stderr, flush=True)
    where = "the cluster of containers, one rank per node" if a.cluster else "one host, one core per rank"
    print(f"\n{where}; tokens/s over all ranks, median (min-max) of {a.repeats}; MB per step measured / computed\n")
    print("| architecture | vocab | np | tokens/s | bytes per step: measured / computed (MB) | ratio | hosts |")
    print("|---|---|---|---|---|---|---|")
    for arch, vocab, np_ in cells:
        results = got[(arch, vocab, np_)]
        rates = [x.summary.tokens_per_sec_total or 0.0 for x in results]
        computed = results[0].traffic.computed.bytes_per_step if results[0].traffic else 0
        measured = [x.traffic.measured.bytes_per_step for x in results
                    if x.traffic and x.traffic.measured and x.traffic.measured.bytes_per_step is not None]
        hosts = sorted({h for x in results for h in x.hosts})
        m = statistics.median(measured) if measured else None
        ratio = f"{m / computed:.3f}" if m and computed else "–"
        print(f"| {arch} | {vocab} | {np_} | {statistics.median(rates):.0f} ({min(rates):.0f}-{max(rates):.0f}) | "
              f"{(m or 0) / 1e6:.2f} / {computed / 1e6:.2f} | {ratio} | {' '.join(hosts)} |")
    print(f"\nresults: {base}", file=sys.stderr)


if __name__ == "__main__":
    main()
