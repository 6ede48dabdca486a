"""bench against a bare loop doing the same work; prints a table and the median ratio.

    python -m tools.benchmarks.overhead --mode torch-ddp  [--repeats 5] [--np 2] [--model vgg16] [--image-size 64] ...
    python -m tools.benchmarks.overhead --mode tf-horovod [--repeats 5] ...
    python -m tools.benchmarks.overhead --mode tf-native [--repeats 5] ...

References: torch-ddp -> tools/benchmarks/bare_ddp.py under torchrun; tf-horovod -> tools/benchmarks/bare_tf_horovod.py
under horovodrun --gloo; tf-native (multiworker) -> tools/benchmarks/bare_tf_native.py, one process per worker
with its TF_CONFIG. Runs are interleaved (bench, bare, bench, bare, ...) so drift on a shared
machine hits both alike. Ratio = bench's measured total img/s / the bare loop's total img/s, with the
same model, batch and ranks: bench does windows x steps_per_window timed steps after 1 + warmup
steps; the bare loop times the same number of steps after the same warmup.
"""

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


def run_bench(a, out: Path) -> float:
    before = results_in(out)
    subprocess.run([sys.executable, "-m", "bench", a.mode, "--np", str(a.np), "--model", a.model,
                    "--image-size", str(a.image_size), "--batch-size", str(a.batch_size),
                    "--warmup-steps", str(a.warmup_steps), "--steps-per-window", str(a.steps_per_window),
                    "--windows", str(a.windows), "--output", str(out)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return new_result(out, before).summary.samples_per_sec_total


def run_bare_tf_native(a, loop: list[str]) -> float:
    """Every worker with its TF_CONFIG; total = all images / the slowest worker's timed seconds."""
    from bench.launching.supervise import free_port

    cluster = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(a.np)]}
    procs = [subprocess.Popen([sys.executable, str(HERE / "bare_tf_native.py"), *loop], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True,
                              env=dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster,
                                                                         "task": {"type": "worker", "index": i}})))
             for i in range(a.np)]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("bare tf.distribute loop failed")
    lines = [json.loads(next(x for x in out.splitlines() if "worker_seconds" in x)) for out in outs]
    return lines[0]["images"] / max(x["worker_seconds"] for x in lines)


def run_bare(a) -> float:
    loop = ["--model", a.model, "--image-size", str(a.image_size), "--batch-size", str(a.batch_size),
            "--warmup-steps", str(a.warmup_steps), "--steps", str(a.steps_per_window * a.windows)]
    if a.mode == "tf-native":
        return run_bare_tf_native(a, loop)
    if a.mode == "torch-ddp":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(a.np),
               str(HERE / "bare_ddp.py"), *loop]
    else:
        cmd = [str(Path(sys.executable).parent / "horovodrun"), "-np", str(a.np), "--gloo", sys.executable,
               str(HERE / "bare_tf_horovod.py"), *loop]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    line = next(x for x in reversed(out.splitlines()) if "samples_per_sec_total" in x)
    return json.loads(line[line.index("{"):])["samples_per_sec_total"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["torch-ddp", "tf-horovod", "tf-native"], default="torch-ddp")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--model", default="vgg16")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--steps-per-window", type=int, default=4)
    p.add_argument("--windows", type=int, default=5)
    a = p.parse_args()

    bare = {"torch-ddp": "bare DDP (torchrun)", "tf-horovod": "bare Horovod TF (horovodrun)",
            "tf-native": "bare tf.distribute loop"}[a.mode]
    table = Table("repeat", f"bench {a.mode} img/s", f"{bare} img/s", "ratio",
                  title=f"{a.mode} vs {bare}: {a.model} {a.image_size}x{a.image_size} batch {a.batch_size}, "
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
