"""bench torch-ddp against a bare DDP loop doing the same work; prints a table and the median ratio.

    python benchmarks/ddp_overhead.py [--repeats 5] [--np 2] [--model vgg16] [--image-size 64] ...

Runs are interleaved (bench, bare, bench, bare, ...) so drift on a shared machine hits both alike.
Ratio = bench's measured total img/s / bare loop's total img/s, same model, batch, steps and ranks:
bench does 'windows x steps_per_window' timed steps after 1 + warmup steps, the bare loop the same
number after the same warmup.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent


def run_bench(a, out: Path) -> float:
    before = set(out.glob("*.json"))
    subprocess.run([sys.executable, "-m", "bench", "torch-ddp", "--np", str(a.np), "--model", a.model,
                    "--image-size", str(a.image_size), "--batch-size", str(a.batch_size),
                    "--warmup-steps", str(a.warmup_steps), "--steps-per-window", str(a.steps_per_window),
                    "--windows", str(a.windows), "--output", str(out)], check=True, stdout=subprocess.DEVNULL)
    (new,) = set(out.glob("*.json")) - before
    return json.loads(new.read_text())["summary"]["images_per_sec_total"]


def run_bare(a) -> float:
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(a.np),
                          str(HERE / "bare_ddp.py"), "--model", a.model, "--image-size", str(a.image_size),
                          "--batch-size", str(a.batch_size), "--warmup-steps", str(a.warmup_steps + 1),
                          "--steps", str(a.steps_per_window * a.windows)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["images_per_sec_total"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--model", default="vgg16")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--steps-per-window", type=int, default=4)
    p.add_argument("--windows", type=int, default=5)
    a = p.parse_args()

    table = Table("repeat", "bench img/s", "bare DDP img/s", "ratio",
                  title=f"torch-ddp vs bare DDP: {a.model} {a.image_size}x{a.image_size} batch {a.batch_size}, "
                        f"{a.np} ranks, {a.steps_per_window * a.windows} timed steps")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeats):
            b = run_bench(a, Path(tmp))
            r = run_bare(a)
            ratios.append(b / r)
            table.add_row(str(i + 1), f"{b:.2f}", f"{r:.2f}", f"{b / r:.3f}")
    table.add_row("median", "", "", f"{statistics.median(ratios):.3f}")
    Console().print(table)


if __name__ == "__main__":
    main()
