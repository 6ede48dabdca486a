"""A --data run's wall-clock throughput against the samples its model was seen to train on.

    python -m tools.benchmarks.wall_count [--images 512] [--batch-size 16] [--windows 3] [--steps-per-window 10]
                                          [--workers 0,1,2] [--repeats 2]

Each run is `bench torch-ddp --np 2 --data FOLDER` (a `bench data make` JPEG folder, the torch loader, ResNet-20 at
32 px, no attribution steps) with the plugin model of tools/benchmarks/counted_model.py, which writes every
training forward's samples to a file per rank. The independent figure is what the ranks' forwards saw after the
run's first step (the first step is init's) over the result's own train_s, the interval the wall-clock figure
divides by; the table puts the result's samples_per_sec_wall_train beside it, and the figure the formula gave
before the settling steps were counted (the warmup and windows' samples only). Any forward the formula does not
know of (or one it counts that did not run) shows as a ratio off 1. The span column is the wall time from the
second forward to the last against train_s: the same interval, to within a step.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def bench(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, **(env or {})}, check=False)
    if r.returncode != 0:
        sys.exit(f"bench {' '.join(args[:2])} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return r


def one_run(folder: Path, work: Path, args, workers: int) -> dict:
    counted, out = Path(tempfile.mkdtemp(dir=work)), Path(tempfile.mkdtemp(dir=work))
    env = {"HVDBENCH_PLUGINS": "counted_model", "COUNTED_DIR": str(counted),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    bench("torch-ddp", "--np", "2", "--model", "counted-resnet20", "--image-size", "32", "--data", str(folder),
          "--batch-size", str(args.batch_size), "--windows", str(args.windows), "--steps-per-window",
          str(args.steps_per_window), "--loader-workers", str(workers), "--attribution-steps", "0",
          "--no-telemetry", "--output", str(out), env=env)
    (path,) = out.glob("*.json")
    result = json.loads(path.read_text())
    ranks = [p.read_text().split() for p in sorted(counted.glob("rank-*"))]
    seen = sum(int(samples) - int(first_batch) for samples, first_batch, _, _ in ranks)
    span = max(float(last) for *_, last in ranks) - min(float(first) for _, _, first, _ in ranks)
    train_s = result["timing"]["train_s"]
    world, batch, spw = result["world_size"], args.batch_size, args.steps_per_window
    if len(ranks) != world:
        sys.exit(f"{len(ranks)} rank count(s) for a world of {world}: {ranks}")
    warmup = len(result["samples"]["warmup_step_s"][0])  # each rank's warmup steps
    before = world * batch * (warmup + args.windows * spw) / train_s
    return {"workers": workers, "reported": result["summary"]["samples_per_sec_wall_train"],
            "independent": seen / train_s, "before": before, "span": span, "train_s": train_s,
            "samples": seen}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--steps-per-window", type=int, default=10)
    p.add_argument("--workers", default="0,1,2", help="--loader-workers of each run, comma-separated")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        folder = work / "data"
        bench("data", "make", str(folder), "--images", str(args.images), "--image-size", "40")
        rows = [one_run(folder, work, args, int(w)) for _ in range(args.repeats) for w in args.workers.split(",")]
    table = Table("loader workers", "train_s", "samples seen", "independent /s", "reported /s", "reported / indep.",
                  "before / indep.", "span / train_s", title="torch-ddp --np 2 --data: wall_train against the "
                  "model's own count")
    for r in rows:
        table.add_row(str(r["workers"]), f"{r['train_s']:.2f}", str(r["samples"]), f"{r['independent']:.1f}",
                      f"{r['reported']:.1f}", f"{r['reported'] / r['independent']:.4f}",
                      f"{r['before'] / r['independent']:.4f}",
                      f"{r['span'] / r['train_s']:.3f}")
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
