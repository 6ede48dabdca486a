"""The SIF against the venv and Docker: start-up, throughput, and (optionally) sbatch to result. Prints tables.

    python -m tools.benchmarks.apptainer --sif /var/cache/hvdbench/sif/hvdbench-current-cpu.sif [--repeats 5]
    python -m tools.benchmarks.apptainer --sif ... --parts sbatch   # time each batch script (tools/slurm-up.sh)

Needs `apptainer` on PATH (make apptainer-up), the SIF (make sif) and, for the Docker column, the image
hvdbench:current-cpu. Start-up: wall time of the same tiny run (torch-single, ResNet-50 at 32x32, batch 2,
one timed step) bare in the venv, under `apptainer exec`, and under `docker run`; median of the repeats.
Throughput: the same CPU run (torch-ddp, 2 self-spawned ranks) in the SIF and in the venv, alternated
(venv, SIF, venv, SIF, ...) so drift hits both; ratio = the SIF's median img/s / the venv's median img/s.
sbatch: from submission to the result file's modification time (when the result landed), and to
`sbatch --wait` returning (it polls the job's state, so it adds up to tens of seconds).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tools.benchmarks import new_result, results_in

ROOT = Path(__file__).resolve().parents[2]
TINY = ["torch-single", "--model", "resnet50", "--image-size", "32", "--batch-size", "2", "--num-classes", "10",
        "--warmup-steps", "1", "--steps-per-window", "1", "--windows", "1", "--no-telemetry"]


def env() -> dict[str, str]:
    return dict({k: v for k, v in os.environ.items() if not k.startswith(("HVDBENCH_", "SLURM_"))},
                OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")


def timed(cmd: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env())
    return time.monotonic() - start


def throughput(prefix: list[str], args: list[str], out: Path) -> float:
    before = results_in(out)
    subprocess.run([*prefix, *args, "--output", str(out)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=env())
    return new_result(out, before).summary.samples_per_sec_total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sif", type=Path, required=True)
    p.add_argument("--image", default="hvdbench:current-cpu")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--model", default="vgg16")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--parts", default="startup,throughput", help="any of startup, throughput, sbatch")
    a = p.parse_args()
    console = Console(width=160)
    bare = [sys.executable, "-m", "bench"]
    with tempfile.TemporaryDirectory(prefix="hvdbench-apptainer-bench-", dir="/tmp") as tmp:
        out = Path(tmp)
        sif = ["apptainer", "exec", "--bind", tmp, str(a.sif), "bench"]
        docker = ["/usr/bin/docker", "run", "--rm", "--network", "host", "-v", f"{tmp}:{tmp}", a.image]
        parts = a.parts.split(",")
        if "startup" in parts:
            startup_table(a, console, out, {"venv (bare)": bare, "apptainer exec": sif, "docker run": docker})
        if "throughput" in parts:
            throughput_table(a, console, out, bare, sif)
        if "sbatch" in parts:
            sbatch_table(a, console, out)


def startup_table(a, console: Console, out: Path, runners: dict[str, list[str]]) -> None:
    starts = {name: [] for name in runners}
    for _ in range(a.repeats):
        for name, prefix in runners.items():
            starts[name].append(timed([*prefix, *TINY, "--output", str(out / "tiny")]))
    t = Table("how", "median s", "min s", "max s", "minus bare (s)",
              title=f"start-up: the same tiny run ({' '.join(TINY[:1])}, 1 step), {a.repeats} repeats")
    base = statistics.median(starts["venv (bare)"])
    for name, xs in starts.items():
        m = statistics.median(xs)
        t.add_row(name, f"{m:.2f}", f"{min(xs):.2f}", f"{max(xs):.2f}", f"{m - base:+.2f}")
    console.print(t)


def throughput_table(a, console: Console, out: Path, bare: list[str], sif: list[str]) -> None:
    args = ["torch-ddp", "--np", "2", "--model", a.model, "--image-size", str(a.image_size), "--batch-size",
            str(a.batch_size), "--warmup-steps", "2", "--steps-per-window", "4", "--windows", "3"]
    rates = {"venv": [], "sif": []}
    for _ in range(a.repeats):
        rates["venv"].append(throughput(bare, args, out / "venv"))
        rates["sif"].append(throughput(sif, args, out / "sif"))
    ratios = [s / v for s, v in zip(rates["sif"], rates["venv"], strict=True)]
    t = Table("run", "venv img/s", "SIF img/s", "SIF / venv",
              title=f"throughput: torch-ddp {a.model} {a.image_size}x{a.image_size} batch {a.batch_size}, "
                    "2 ranks, alternated")
    for i, (v, s, r) in enumerate(zip(rates["venv"], rates["sif"], ratios, strict=True)):
        t.add_row(str(i + 1), f"{v:.2f}", f"{s:.2f}", f"{r:.3f}")
    ratio = statistics.median(rates["sif"]) / statistics.median(rates["venv"])
    t.add_row("median", f"{statistics.median(rates['venv']):.2f}", f"{statistics.median(rates['sif']):.2f}",
              f"{ratio:.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
    console.print(t)
    console.print(f"SIF {a.sif}: {a.sif.stat().st_size / 2**30:.2f} GiB")


def sbatch_table(a, console: Console, out: Path) -> None:
    conf = subprocess.run([str(ROOT / "tools" / "slurm-up.sh")], capture_output=True, text=True, check=True)
    small = "--model resnet50 --image-size 32 --batch-size 2 --num-classes 10 --warmup-steps 1 " \
            "--steps-per-window 2 --windows 2"
    t = Table("script", "mode", "s to the result file", "s to sbatch --wait returning",
              title="sbatch under apptainer (1 node, 2 tasks)")
    for script, mode in (("ddp.sbatch", "torch-ddp"), ("horovod.sbatch", "tf-horovod"),
                         ("horovod.sbatch", "torch-horovod"), ("tf-native.sbatch", "tf-native")):
        work = out / f"sbatch-{script}-{mode}"
        work.mkdir()
        e = dict(env(), SLURM_CONF=conf.stdout.strip().splitlines()[-1], HVDBENCH_RUNTIME="apptainer",
                 HVDBENCH_SIF=str(a.sif), HVDBENCH_RESULTS=str(work / "results"), MODE=mode,
                 BENCH_ARGS=small.replace("32", "64", 1) if mode.startswith("tf") else small)
        start, wall = time.monotonic(), time.time()
        subprocess.run(["sbatch", "--wait", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1",
                        str(ROOT / "singularity" / "slurm" / script)], check=True, env=e, cwd=work,
                       stdout=subprocess.DEVNULL)
        waited = time.monotonic() - start
        (result,) = (work / "results").glob("*.json")
        t.add_row(script, mode, f"{result.stat().st_mtime - wall:.1f}", f"{waited:.1f}")
    console.print(t)


if __name__ == "__main__":
    main()
