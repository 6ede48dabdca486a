"""What an epoch boundary costs a DALI run's training step: the wait for the first batch of each epoch against the
wait for the others, in this checkout and (--against REF) in another commit of it.

    python -m tools.benchmarks.dali_epochs [--against REF] [--images 256] [--batch-size 32] [--epochs 4]
                                           [--step-ms 150] [--threads 1] [--repeats 3]

Each run reads --epochs epochs of a `bench data make` JPEG folder through the dali loader (DALI on the CPU, one
rank) in a process of its own, as a training loop does: ask for a batch (timed: the wait), then a stand-in step of
--step-ms while DALI's threads decode ahead, so the loader keeps up and a steady step waits about nothing. A goal
run's windows are its epochs, so whatever the first batch of an epoch waits is in a window. The runs of the two
checkouts alternate over --repeats rounds; the table gives each one's median wait at the epoch boundaries (every
epoch's first batch but the run's first) and elsewhere (neither the run's first nor a boundary), in ms.
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

CHILD = """
import json, sys, time
from bench.data import datasets
from bench.data.loaders import LOADERS
folder, batch, epochs, step_s, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), \\
    int(sys.argv[5])
data = datasets.load(folder, None)
batches = iter(LOADERS["dali"].batches(data, "train", 224, batch, threads, seed=1, rank=0, world=1, epoch=0,
                                       epochs=epochs, framework="torch"))
waits = []
while True:
    t0 = time.perf_counter()
    try:
        next(batches)
    except StopIteration:
        break
    waits.append(time.perf_counter() - t0)
    time.sleep(step_s)
print(json.dumps({"waits": waits, "per_epoch": len(waits) // epochs}))
"""


def one_run(checkout: Path, args, folder: Path) -> tuple[float, float]:
    """(median wait at the epoch boundaries, median wait elsewhere), in seconds, of one run in ``checkout``."""
    r = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(args.batch_size), str(args.epochs),
                        str(args.step_ms / 1000), str(args.threads)], cwd=checkout, capture_output=True, text=True,
                       check=False)
    if r.returncode != 0:
        sys.exit(f"the dali run in {checkout} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    waits, per = out["waits"], out["per_epoch"]
    boundary = [w for i, w in enumerate(waits) if i and i % per == 0]
    steady = [w for i, w in enumerate(waits) if i and i % per]
    return statistics.median(boundary), statistics.median(steady)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="another commit to time the same way (a git worktree of it)")
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--step-ms", type=float, default=150.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.epochs < 2 or args.repeats < 1 or args.images < 2 * args.batch_size:
        sys.exit("--epochs must be at least 2, --repeats at least 1, --images at least two batches")
    here = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "jpegs"
        made = subprocess.run([sys.executable, "-m", "bench", "data", "make", str(folder), "--images",
                               str(args.images + args.images // 4), "--classes", "4"], cwd=here, capture_output=True,
                              text=True, check=False)
        if made.returncode != 0:
            sys.exit(f"bench data make failed: {made.stderr.strip()}")
        checkouts = {"this checkout": here}
        if args.against:
            other = Path(tmp) / "against"
            subprocess.run(["git", "-C", str(here), "worktree", "add", "--detach", str(other), args.against],
                           check=True, capture_output=True)
            checkouts[args.against] = other
        try:
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name in checkouts}
            for i in range(args.repeats):
                order = list(checkouts.items())
                for name, path in order if i % 2 == 0 else reversed(order):
                    runs[name].append(one_run(path, args, folder))
        finally:
            if args.against:
                subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force", str(other)], check=False)
    table = Table("code", "boundary wait (ms)", "other steps' wait (ms)", "runs",
                  title=f"dali, {args.threads} thread(s), batch {args.batch_size}, {args.epochs} epochs of "
                        f"{args.images} images, {args.step_ms:g} ms steps")
    for name, rows in runs.items():
        table.add_row(name, f"{statistics.median(b for b, _ in rows) * 1000:.1f}",
                      f"{statistics.median(s for _, s in rows) * 1000:.1f}", str(len(rows)))
    Console().print(table)


if __name__ == "__main__":
    main()
