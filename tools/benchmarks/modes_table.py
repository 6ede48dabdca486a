"""Run every mode on one setting and print one table: img/s total and per rank, init and first step.

    python -m tools.benchmarks.modes_table [--model vgg16] [--image-size 32] [--batch-size 2] [--np 2] [--repeats 1]
        [--modes tf-horovod,tf-native:multiworker,tf-native:mirrored,tf-native:ps,torch-ddp,torch-horovod]

Each run writes its normal result into --output (default: a new folder under results/modes-table-*);
the table is read from those files. With --repeats > 1 each cell is the median over repeats.
mirrored runs one process for the local devices (on CPU: 1 replica); ps counts --np workers.
"""

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.records.metrics import METRICS
from bench.records.schema import Result
from tools.benchmarks import new_result, results_in

ALL = "tf-horovod,tf-native:multiworker,tf-native:mirrored,tf-native:ps,torch-ddp,torch-horovod"


def run(mode_spec: str, a, out: Path) -> Result:
    mode, _, strategy = mode_spec.partition(":")
    args = [sys.executable, "-m", "bench", mode, "--model", a.model, "--image-size", str(a.image_size),
            "--batch-size", str(a.batch_size), "--warmup-steps", str(a.warmup_steps),
            "--steps-per-window", str(a.steps_per_window), "--windows", str(a.windows), "--output", str(out)]
    if strategy:
        args += ["--strategy", strategy]
    if strategy != "mirrored":
        args += ["--np", str(a.np)]
    before = results_in(out)
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return new_result(out, before)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default=ALL)
    p.add_argument("--model", default="vgg16")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--steps-per-window", type=int, default=4)
    p.add_argument("--windows", type=int, default=5)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--output", type=Path)
    a = p.parse_args()
    out = a.output or Path("results") / time.strftime("modes-table-%Y%m%dT%H%M%S")
    out.mkdir(parents=True, exist_ok=True)

    table = Table("mode", "ranks", "img/s total", "img/s per rank", "init s", "first step s", "train s",
                  title=f"{a.model} {a.image_size}x{a.image_size}, batch {a.batch_size}/rank, "
                        f"{a.warmup_steps} warmup + {a.windows}x{a.steps_per_window} timed steps"
                        + (f", median of {a.repeats}" if a.repeats > 1 else ""))
    columns = [("samples_per_sec_total", "{:.2f}"), ("samples_per_sec_per_gpu", "{:.2f}"), ("init_s", "{:.1f}"),
               ("first_step_s", "{:.2f}"), ("train_s", "{:.1f}")]
    for spec in a.modes.split(","):
        results = [run(spec, a, out) for _ in range(a.repeats)]
        cells = [fmt.format(statistics.median(METRICS[key].value(r) for r in results)) for key, fmt in columns]
        table.add_row(spec, str(results[0].world_size), *cells)
    Console().print(table)
    print(f"results: {out}")


if __name__ == "__main__":
    main()
