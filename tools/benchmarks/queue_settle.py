"""A `--data` run whose loader is slower than training: its headline with the input queue full or empty when the
warm-up ends.

    python -m tools.benchmarks.queue_settle [--repeats 3] [--checkout DIR] [--data DIR]

torch-single, ResNet-20 at 32 px, batch 16, one loader worker (a queue of 2 batches; more workers than the 2 cores
here only trade the workers' time for training's) reading 2000 x 2000 JPEGs: decoding them takes longer than a
training step, so the input sets the pace. Compiled (--compile default), so that the first step takes seconds, as a
GPU run's start does: the worker fills its queue meanwhile. Two warm-ups, alternated over --repeats rounds: none
(that queue still full when the clock would start) and 24 steps (drained by then). With the timed windows started in
the queue's steady state (bench.data.feed) both give the same headline; a run that counts the batches made before
its clock started reads higher after the short warm-up. --checkout runs another checkout's bench (its root: an
earlier commit, for the figure before). The table gives the median headline, wait share, the queue when the clock
started and the settling steps.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.records.results import load_result

ROOT = Path(__file__).resolve().parents[2]
RUN = ["torch-single", "--model", "resnet20", "--image-size", "32", "--batch-size", "16", "--compile", "default",
       "--steps-per-window", "4", "--windows", "3", "--attribution-steps", "0"]


def run_once(checkout: Path, data: str, warmup: int, workers: int, out: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "bench", *RUN, "--data", data, "--warmup-steps", str(warmup),
                           "--loader-workers", str(workers), "--output", str(out)], cwd=checkout,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"queue_settle: the run failed: {done.stderr.strip().splitlines()[-1:]}")
    (path,) = out.glob("*.json")
    result = load_result(path)  # a result of an older checkout is read as the current schema
    assert result.input is not None, path
    rank = result.input.per_rank[0]
    return {"rate": result.summary.samples_per_sec_total, "wait": rank.wait_share, "queue": rank.queue_at_start,
            "settle": rank.settle_steps}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--checkout", type=Path, default=ROOT)
    p.add_argument("--workers", type=int, default=1, help="loader workers (a queue of 2 batches each)")
    p.add_argument("--warmups", default="0,24", help="the two warm-ups: short, long")
    p.add_argument("--data", help="a dataset of large JPEGs (default: made here, 240 of 2000 x 2000 to train on)")
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hvdbench-queue-"))
    data = a.data
    if data is None:
        data = str(work / "jpegs")
        subprocess.run([sys.executable, "-m", "bench", "data", "make", data, "--images", "300", "--classes", "4",
                        "--image-size", "2000"], cwd=ROOT, check=True, capture_output=True)
    WARMUPS = tuple(int(w) for w in a.warmups.split(","))
    runs: dict[int, list[dict]] = {w: [] for w in WARMUPS}
    for r in range(a.repeats):
        for w in WARMUPS:
            runs[w].append(run_once(a.checkout, data, w, a.workers, work / f"w{w}-{r}"))
    table = Table(title=f"a loader slower than training, {a.repeats} alternated runs each (medians): "
                        f"{a.checkout}")
    for col in ("warm-up steps", "img/s", "wait share", "queue at start", "settle steps"):
        table.add_column(col, justify="right")
    for w, found in runs.items():
        queues = sorted({str(f["queue"]) for f in found})
        table.add_row(str(w), f"{statistics.median(f['rate'] for f in found):.1f}",
                      f"{100 * statistics.median(f['wait'] for f in found):.0f}%", "/".join(queues),
                      f"{statistics.median(f['settle'] for f in found):.0f}")
    Console().print(table)
    short, long_ = (statistics.median(f["rate"] for f in runs[w]) for w in WARMUPS)  # noqa: N806
    print(f"headline after {WARMUPS[0]} warm-up step / after {WARMUPS[1]}: {short / long_:.3f}")


if __name__ == "__main__":
    main()
