"""What reading real data costs a training run: each model and mode from JPEG files (--data) and from its synthetic
batch, alternated, with the data-wait share per rank.

    python -m tools.benchmarks.data_cost [--models vgg16,resnet50] [--modes torch-ddp,tf-horovod] [--repeats 2]
                                   [--np 2] [--image-size 224] [--images 256] [--data DIR]

The dataset (default: made here once, ``bench data make`` with ImageNet-like 500x375 JPEGs) is read at
--image-size. Per (model, mode) the runs alternate synthetic, data, synthetic, data (a drift on the machine hits
both alike). Per cell: the median total img/s of each, the input cost = 1 - data / synthetic (bench compare's
formula), and per rank the median share of its timed windows its steps waited for data (the result's
input.per_rank[].wait_share).
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.records.schema import Result
from tools.benchmarks import new_result, results_in

# Steps per run: small enough for VGG-16 at 224 px on two CPU cores, the same for both inputs.
RUN = {"vgg16": ["--batch-size", "4", "--warmup-steps", "1", "--steps-per-window", "2", "--windows", "2"],
       "resnet50": ["--batch-size", "8", "--warmup-steps", "1", "--steps-per-window", "2", "--windows", "3"]}


def run(a, model: str, mode: str, data: str | None, out: Path) -> Result:
    before = results_in(out)
    cmd = [sys.executable, "-m", "bench", mode, "--model", model, "--np", str(a.np), "--image-size",
           str(a.image_size), "--num-classes", str(a.classes), "--attribution-steps", "0", "--output", str(out),
           *RUN.get(model, RUN["resnet50"])]
    if data:
        cmd += ["--data", data]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return new_result(out, before)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="vgg16,resnet50")
    p.add_argument("--modes", default="torch-ddp,tf-horovod")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--data", help="an existing dataset folder (default: one made here)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="hvdbench-data-cost-") as tmp:
        data = a.data
        if data is None:
            data = str(Path(tmp) / "jpegs")
            subprocess.run([sys.executable, "-m", "bench", "data", "make", data, "--images", str(a.images),
                            "--classes", str(a.classes)], check=True, stdout=subprocess.DEVNULL)
        out = Path(tmp) / "results"
        out.mkdir()
        table = Table("model", "mode", "synthetic img/s", "data img/s", "input cost", "data wait share per rank",
                      "loader alone img/s per rank", title=f"--data against synthetic, np {a.np}, "
                      f"{a.image_size}x{a.image_size}, median of {a.repeats} alternated")
        for model in a.models.split(","):
            for mode in a.modes.split(","):
                synth, real, shares, rates = [], [], [], []
                for _ in range(a.repeats):
                    synth.append(run(a, model, mode, None, out).summary.samples_per_sec_total)
                    result = run(a, model, mode, data, out)
                    real.append(result.summary.samples_per_sec_total)
                    assert result.input is not None, result.run_id
                    shares.append([r.wait_share for r in result.input.per_rank])
                    rates.append([r.loader_rate for r in result.input.per_rank])
                s, d = statistics.median(synth), statistics.median(real)
                share = " / ".join(f"{100 * statistics.median(x):.1f}%" for x in zip(*shares, strict=True))
                rate = " / ".join(f"{statistics.median(x):.0f}" for x in zip(*rates, strict=True))
                table.add_row(model, mode, f"{s:.2f}", f"{d:.2f}", f"{100 * (1 - d / s):+.1f}%", share, rate)
                print(f"{model} {mode}: synthetic {[round(x, 2) for x in synth]}, data {[round(x, 2) for x in real]}",
                      file=sys.stderr, flush=True)
        Console(width=160).print(table)


if __name__ == "__main__":
    main()
