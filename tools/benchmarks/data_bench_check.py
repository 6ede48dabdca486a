"""`bench data bench` against an independent timing of the same loader: a long steady-state read.

    python -m tools.benchmarks.data_bench_check [--loaders torch,tf] [--workers 1,2] [--repeats 3] [--images 1600]
                                                [--image-size 224] [--batch-size 16] [--data DIR]

Per loader and worker count, alternated over --repeats rounds: `bench data bench`'s figure (its own short
measurement: the untimed and timed batches of bench.commands.data.lengths), and the independent one, read in this
process from the same loader and shard: after 4 W + 2 batches untimed, every image of LONG more batches (one pass
over the shard) over the time from the last untimed batch to the last one. The loaders' own prefetching, the
start-up and the clock's edges weigh 1/LONG of it. The table gives the medians and their ratio.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.records import store
from bench.records.kinds import DataBench
from tools.benchmarks import new_file, results_in

LONG = 64  # timed batches of the independent read (one pass: no epoch's restart inside it)


def rate_after(batches, untimed: int, count: int) -> tuple[float | None, int]:
    """Images per second over ``count`` batches after ``untimed`` untimed ones, and the batches read; the rate is
    None when the batches ended first."""
    seen, t0, read = 0, None, 0
    for read, (images, _) in enumerate(batches, start=1):
        if read == untimed:
            t0 = time.perf_counter()
        elif read > untimed:
            seen += int(images.shape[0])
        if read == untimed + count:
            return seen / (time.perf_counter() - t0), read
    return None, read


def independent(path: str, name: str, workers: int, a) -> float:
    from bench.data import datasets
    from bench.data.loaders import loader

    dataset = datasets.load(path)
    untimed = 4 * workers + 2
    rate, read = rate_after(loader(name).batches(dataset, "train", a.image_size, a.batch_size, workers, 0, 0, 1),
                            untimed, LONG)
    if rate is not None:
        return rate
    raise SystemExit(f"data_bench_check: the training split gave {read} batches of {a.batch_size}; the independent "
                     f"read needs {untimed + LONG}: more --images")


def run_bench(tool: str, *args: str) -> None:
    """``bench ARGS`` in a process of its own, its output dropped; where it fails, its own one line (a dataset too
    small for the workers, a folder that exists) ends the benchmark, not a traceback."""
    proc = subprocess.run([sys.executable, "-m", "bench", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise SystemExit(f"{tool}: bench {' '.join(args[:2])}: {last}")


def data_bench(path: str, name: str, workers: int, a, out: Path) -> float:
    before = results_in(out)
    run_bench("data_bench_check", "data", "bench", path, "--loaders", name, "--workers", str(workers), "--image-size",
              str(a.image_size), "--batch-size", str(a.batch_size), "--repeats", "1", "--output", str(out))
    return store.load(new_file(out, before), DataBench).rows[0].images_per_sec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loaders", default="torch,tf")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--images", type=int, default=1600)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--data", help="a dataset folder (default: bench data make writes one here)")
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hvdbench-data-check-"))
    path = a.data or str(work / "jpegs")
    if not a.data:
        run_bench("data_bench_check", "data", "make", path, "--images", str(a.images))
    cells = [(n, int(w)) for n in a.loaders.split(",") for w in a.workers.split(",")]
    found: dict[tuple, dict[str, list[float]]] = {c: {"bench": [], "independent": []} for c in cells}
    for r in range(a.repeats):
        for name, workers in cells:
            found[(name, workers)]["bench"].append(data_bench(path, name, workers, a, work))
            found[(name, workers)]["independent"].append(independent(path, name, workers, a))
            print(f"round {r + 1}: {name} {workers}: bench {found[(name, workers)]['bench'][-1]:.1f}, independent "
                  f"{found[(name, workers)]['independent'][-1]:.1f} img/s", file=sys.stderr, flush=True)
    table = Table("loader", "workers", "bench data bench img/s", f"independent ({LONG} batches) img/s",
                  "bench / independent", "rounds")
    for (name, workers), v in found.items():
        b, i = statistics.median(v["bench"]), statistics.median(v["independent"])
        table.add_row(name, str(workers), f"{b:.1f}", f"{i:.1f}", f"{b / i:.3f}",
                      " ".join(f"{x:.0f}/{y:.0f}" for x, y in zip(v["bench"], v["independent"], strict=True)))
    Console().print(table)


if __name__ == "__main__":
    main()
