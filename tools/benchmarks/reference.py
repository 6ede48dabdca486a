"""bench's Horovod modes side by side with Horovod's own synthetic benchmarks (tools/benchmarks/reference/).

    python -m tools.benchmarks.reference [--frameworks tf torch] [--models vgg16 resnet50] [--batch-sizes 2 4]
                                   [--np 1 2] [--repeats 3] [--warmup 2] [--batches-per-iter 2] [--iters 3]
                                   [--json FILE] [-- extra bench options]

Per setting (framework x model x batch x np) the two run alternately, ``--repeats`` times each, in ABBA
order (bench first in even repeats, the reference first in odd ones), so drift on a shared machine hits
both alike:

* reference: ``horovodrun -np N --gloo python <script> --model M --batch-size B --no-cuda
  --num-warmup-batches W --num-batches-per-iter K --num-iters I`` (224x224, 1000 classes, fixed in the
  scripts); its figure is rank 0's img/s per iteration, averaged over iterations ("Img/sec per CPU"),
  read at full precision from the JSON line the vendored copy adds.
* bench: ``bench tf-horovod|torch-horovod --np N --model M --image-size 224 --batch-size B
  --warmup-steps W --steps-per-window K --windows I`` (self-spawned, the user's path). The same statistic
  from its raw samples: mean over windows of B*K / rank 0's window time. bench's headline per-rank figure
  (slowest rank per window) is shown beside it.

On GPUs both time what the GPU did: bench's windows end with a device synchronisation, and the vendored
PyTorch script ends its warm-up and each timed iteration with one (its change 3: on one rank nothing else in its
loop waits for the GPU). Use Horovod's own lengths there (``--warmup 10 --batches-per-iter 10 --iters 10``).

Ratio = bench / reference per repeat (bench run i against reference run i); the table gives the median
ratio and its range. Goal: >= 0.99. Both run on the CPU (the scripts' ``--no-cuda``, bench's ``--device cpu``),
or with ``--cuda`` on the GPUs (tools/gpu-check.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tools.benchmarks import new_result, results_in

HERE = Path(__file__).resolve().parent
REFERENCE = {"tf": HERE / "reference" / "tensorflow2_synthetic_benchmark.py",
             "torch": HERE / "reference" / "pytorch_synthetic_benchmark.py"}
MODE = {"tf": "tf-horovod", "torch": "torch-horovod"}
SCRIPT_MODEL = {"tf": {"vgg16": "VGG16", "resnet50": "ResNet50"}, "torch": {"vgg16": "vgg16", "resnet50": "resnet50"}}


def run_reference(fw: str, model: str, batch: int, np: int, a) -> float:
    horovodrun = Path(sys.executable).parent / "horovodrun"
    cmd = [str(horovodrun) if horovodrun.exists() else "horovodrun", "-np", str(np), "--gloo", sys.executable,
           str(REFERENCE[fw]), "--model", SCRIPT_MODEL[fw][model], "--batch-size", str(batch),
           *([] if a.cuda else ["--no-cuda"]),
           "--num-warmup-batches", str(a.warmup), "--num-batches-per-iter", str(a.batches_per_iter),
           "--num-iters", str(a.iters)]
    # The scripts import bench only for torch models when torchvision is missing.
    path = [str(HERE.parents[1]), os.environ.get("PYTHONPATH")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path)))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    line = next((x for x in r.stdout.splitlines() if "hvdbench_reference" in x), None)
    if r.returncode != 0 or line is None:
        raise SystemExit(f"reference {fw} {model} b{batch} np{np} failed:\n{r.stdout[-2000:]}{r.stderr[-3000:]}")
    data = json.loads(line[line.index("{"):])
    return statistics.fmean(batch * a.batches_per_iter / t for t in data["iter_s"])


def run_bench(fw: str, model: str, batch: int, np: int, a, out: Path) -> tuple[float, float]:
    before = results_in(out)
    cmd = [sys.executable, "-m", "bench", MODE[fw], "--np", str(np), "--model", model, "--image-size", "224",
           "--batch-size", str(batch), "--warmup-steps", str(a.warmup), "--steps-per-window",
           str(a.batches_per_iter), "--windows", str(a.iters), "--output", str(out), "--device",
           "cuda" if a.cuda else "cpu", *a.bench_args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"bench {MODE[fw]} {model} b{batch} np{np} failed:\n{r.stdout[-2000:]}{r.stderr[-3000:]}")
    result = new_result(out, before)
    rank0 = result.samples.window_s[0]
    return (statistics.fmean(batch * a.batches_per_iter / t for t in rank0), result.summary.samples_per_sec_per_gpu)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frameworks", nargs="+", choices=["tf", "torch"], default=["tf", "torch"])
    p.add_argument("--models", nargs="+", choices=["vgg16", "resnet50"], default=["vgg16", "resnet50"])
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[2, 4])
    p.add_argument("--np", nargs="+", type=int, default=[1, 2])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batches-per-iter", type=int, default=2)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--cuda", action="store_true", help="on the GPUs: the scripts without --no-cuda, bench with "
                   "--device cuda (default: both on the CPU)")
    p.add_argument("--json", type=Path, help="also write every measurement here")
    p.add_argument("bench_args", nargs="*", help="extra options for bench (after --)")
    a = p.parse_args()

    table = Table("mode", "model", "batch", "np", "bench img/s/rank (rank 0)", "reference img/s/rank",
                  "ratio median", "ratio range", "bench headline img/s/rank",
                  title=f"bench vs Horovod's synthetic benchmarks, 224x224, {a.warmup} warmup + "
                        f"{a.iters} x {a.batches_per_iter} timed steps, {a.repeats} alternated repeats")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for fw in a.frameworks:
            for model in a.models:
                for batch in a.batch_sizes:
                    for np in a.np:
                        bench_r0, bench_head, ref = [], [], []
                        for i in range(a.repeats):
                            if i % 2:  # ABBA order: a drift on the machine favours neither side
                                ref.append(run_reference(fw, model, batch, np, a))
                            b0, bh = run_bench(fw, model, batch, np, a, Path(tmp))
                            bench_r0.append(b0)
                            bench_head.append(bh)
                            if not i % 2:
                                ref.append(run_reference(fw, model, batch, np, a))
                        ratios = [b / r for b, r in zip(bench_r0, ref, strict=True)]
                        rows.append({"mode": MODE[fw], "model": model, "batch": batch, "np": np,
                                     "bench_rank0": bench_r0, "bench_headline": bench_head, "reference": ref,
                                     "ratios": ratios})
                        table.add_row(MODE[fw], model, str(batch), str(np),
                                      f"{statistics.median(bench_r0):.3f}", f"{statistics.median(ref):.3f}",
                                      f"{statistics.median(ratios):.3f}", f"{min(ratios):.3f}-{max(ratios):.3f}",
                                      f"{statistics.median(bench_head):.3f}")
                        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    Console(width=200).print(table)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
