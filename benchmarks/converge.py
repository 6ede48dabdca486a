"""Training to a target on this machine: bench converge on scikit-learn's handwritten digits (every distributed
mode at np 1 and 2, repeated), then what the evaluations cost a run.

    python benchmarks/converge.py [--modes torch-ddp,torch-horovod,tf-horovod,tf-native] [--np 1,2]
                                  [--repeats 2] [--eval-modes torch-ddp,tf-horovod] [--eval-repeats 2]
                                  [--output results/converge-bench] [--data DIR]

1. ``bench converge`` (ResNet-20 at 12 x 12, batch 32 per rank, 10 epochs, base rate 0.8 per 256 with one epoch
   of warmup, target top-1 0.95): its table, its verdict, and converge.md / converge.png in the output folder.
2. The evaluations' cost: per mode at np 2, runs alternated with an evaluation after every epoch and with one
   after the last only (``--eval-every 10``; every run needs that one), both ``--all-epochs``: the median of
   each one's ``timing.train_s`` (the wall time from init to the end, evaluations included), the difference, and
   the evaluations' own time as the results record it (``training.eval_s_total``).
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

EPOCHS = 10
TRAINING = ["--model", "resnet20", "--image-size", "12", "--batch-size", "32", "--epochs", str(EPOCHS),
            "--target-accuracy", "0.95", "--base-lr", "0.8", "--warmup-epochs", "1", "--loader-workers", "1"]


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True)


def eval_run(mode: str, every: int, data: str, out: Path) -> dict:
    before = set(out.glob("*.json"))
    proc = bench(mode, *TRAINING, "--all-epochs", "--eval-every", str(every), "--np", "2", "--data", data,
                 "--no-telemetry", "--output", str(out))
    if proc.returncode != 0:
        sys.exit(f"{mode} --eval-every {every} failed: {proc.stderr.strip().splitlines()[-1:]}")
    (new,) = set(out.glob("*.json")) - before
    return json.loads(new.read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default="torch-ddp,torch-horovod,tf-horovod,tf-native")
    p.add_argument("--np", default="1,2")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--eval-modes", default="torch-ddp,tf-horovod")
    p.add_argument("--eval-repeats", type=int, default=2)
    p.add_argument("--output", default="results/converge-bench")
    p.add_argument("--data", help="an existing digits dataset (default: made in the output folder)")
    a = p.parse_args()
    out = Path(a.output)
    out.mkdir(parents=True, exist_ok=True)
    data = a.data or str(out / "digits")
    if not Path(data).exists():
        made = bench("data", "make", data, "--format", "cifar", "--from", "digits")
        if made.returncode != 0:
            sys.exit(made.stderr)
    console = Console()
    converged = bench("converge", "--modes", a.modes, "--np", a.np, "--repeats", str(a.repeats), "--data", data,
                      *TRAINING[2:], "--output", str(out / "converge"))
    console.print(converged.stdout)
    if converged.returncode not in (0, 1):
        sys.exit(converged.stderr)

    table = Table("mode", "np", "eval every", "train_s median", "evaluations s", "runs",
                  title="What the evaluations cost (np 2, 10 epochs, alternated)")
    for mode in a.eval_modes.split(","):
        folder = out / "eval-cost" / mode
        folder.mkdir(parents=True, exist_ok=True)
        runs: dict[int, list[dict]] = {1: [], EPOCHS: []}
        for _ in range(a.eval_repeats):
            for every in (1, EPOCHS):
                runs[every].append(eval_run(mode, every, data, folder))
        medians = {}
        for every, rs in runs.items():
            medians[every] = statistics.median(r["timing"]["train_s"] for r in rs)
            table.add_row(mode, "2", str(every), f"{medians[every]:.1f}",
                          f"{statistics.median(r['training']['eval_s_total'] for r in rs):.1f}", str(len(rs)))
        console.print(f"{mode}: an evaluation every epoch adds {medians[1] - medians[EPOCHS]:.1f} s "
                      f"({(medians[1] - medians[EPOCHS]) / medians[EPOCHS]:.1%}) to {medians[EPOCHS]:.1f} s")
    console.print(table)


if __name__ == "__main__":
    main()
