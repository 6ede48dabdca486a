"""Training to a target on this machine: bench converge on scikit-learn's handwritten digits (every distributed
mode at np 1 and 2, repeated), then what the evaluations and the checkpoints cost a run.

    python -m tools.benchmarks.converge_study [--modes torch-ddp,torch-horovod,tf-horovod,tf-native] [--np 1,2]
                                        [--repeats 2] [--eval-modes torch-ddp,tf-horovod] [--eval-repeats 2]
                                        [--output results/converge-bench] [--data DIR]
                                        [--parts converge,eval,checkpoint]

1. ``bench converge`` (ResNet-20 at 12 x 12, batch 32 per rank, 10 epochs, base rate 0.8 per 256 with one epoch
   of warmup, target top-1 0.95): its table, its verdict, and converge.md / converge.png in the output folder.
2. The evaluations' cost: per mode at np 2, runs alternated with an evaluation after every epoch and with one
   after the last only (``--eval-every 10``; every run needs that one), both ``--all-epochs``: the median of
   each one's ``timing.train_s`` (the wall time from init to the end, evaluations included), the difference, and
   the evaluations' own time as the results record it (``training.eval_s_total``).
3. The checkpoints' cost, alike: runs alternated with a checkpoint after every epoch (``--checkpoint-every 1``: 9
   of them, none after the last) and without, both evaluating every epoch; ``training.checkpoint_s_total`` is
   rank 0's own writing time.
"""

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.measure.goal import Training
from bench.records.schema import Result
from tools.benchmarks import new_result, results_in

EPOCHS = 10
TRAINING = ["--model", "resnet20", "--image-size", "12", "--batch-size", "32", "--epochs", str(EPOCHS),
            "--target-accuracy", "0.95", "--base-lr", "0.8", "--warmup-epochs", "1", "--loader-workers", "1"]


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True)


def cost_run(mode: str, extra: list[str], data: str, out: Path) -> Result:
    """One run of the cost comparisons: np 2, every epoch (--all-epochs), ``extra`` options; its result."""
    before = results_in(out)
    proc = bench(mode, *TRAINING, "--all-epochs", *extra, "--np", "2", "--data", data, "--no-telemetry",
                 "--output", str(out))
    if proc.returncode != 0:
        sys.exit(f"{mode} {' '.join(extra)} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return new_result(out, before)


def trained(result: Result) -> Training:
    """A run's training section: every run here trains to a goal, so has one."""
    assert result.training is not None, result.run_id
    return result.training


def cost_table(console: Console, what: str, variants: dict[str, list[str]], field: str, modes: list[str],
               repeats: int, data: str, out: Path) -> None:
    """Runs alternated between ``variants`` (the first with what is costed, the last without) ``repeats``
    times per mode; the median wall time from init to the end (``timing.train_s``) of each, the difference, and
    the median of the results' own ``training.<field>``."""
    table = Table("mode", "variant", "train_s median", f"{field} median", "runs",
                  title=f"What {what} cost (np 2, {EPOCHS} epochs, alternated)")
    for mode in modes:
        folder = out / f"{what.replace(' ', '-')}-cost" / mode
        folder.mkdir(parents=True, exist_ok=True)
        runs: dict[str, list[Result]] = {name: [] for name in variants}
        for _ in range(repeats):
            for name, extra in variants.items():
                runs[name].append(cost_run(mode, extra, data, folder))
        medians = {name: statistics.median(r.timing.train_s for r in rs) for name, rs in runs.items()}
        for name, rs in runs.items():
            table.add_row(mode, name, f"{medians[name]:.2f}",
                          f"{statistics.median(getattr(trained(r), field) for r in rs):.2f}", str(len(rs)))
        with_, without = medians[next(iter(variants))], medians[list(variants)[-1]]
        console.print(f"{mode}: {what} add {with_ - without:.2f} s ({(with_ - without) / without:.1%}) to "
                      f"{without:.1f} s")
    console.print(table)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default="torch-ddp,torch-horovod,tf-horovod,tf-native")
    p.add_argument("--np", default="1,2")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--eval-modes", default="torch-ddp,tf-horovod")
    p.add_argument("--eval-repeats", type=int, default=2)
    p.add_argument("--output", default="results/converge-bench")
    p.add_argument("--data", help="an existing digits dataset (default: made in the output folder)")
    p.add_argument("--parts", default="converge,eval,checkpoint", help="which of converge, eval, checkpoint to run")
    a = p.parse_args()
    out = Path(a.output)
    out.mkdir(parents=True, exist_ok=True)
    data = a.data or str(out / "digits")
    if not Path(data).exists():
        made = bench("data", "make", data, "--format", "cifar", "--from", "digits")
        if made.returncode != 0:
            sys.exit(made.stderr)
    console = Console()
    if "converge" in a.parts:
        converged = bench("converge", "--modes", a.modes, "--np", a.np, "--repeats", str(a.repeats), "--data", data,
                          *TRAINING[2:], "--output", str(out / "converge"))
        console.print(converged.stdout)
        if converged.returncode not in (0, 1):
            sys.exit(converged.stderr)

    if "eval" in a.parts:
        cost_table(console, "the evaluations", {"every epoch": ["--eval-every", "1"],
                                                "after the last": ["--eval-every", str(EPOCHS)]},
                   "eval_s_total", a.eval_modes.split(","), a.eval_repeats, data, out)
    if "checkpoint" in a.parts:
        cost_table(console, "the checkpoints", {"every epoch": ["--checkpoint-every", "1"], "none": []},
                   "checkpoint_s_total", a.eval_modes.split(","), a.eval_repeats, data, out)


if __name__ == "__main__":
    main()
