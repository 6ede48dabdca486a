"""Where a gate's wall time goes: which set-up step or tier ran when, from samples of the machine's processes.

    python -m tools.benchmarks.gate_steps watch LOG [--every 5]   # beside `make bench` or `.ci/run`; Ctrl-C stops
    python -m tools.benchmarks.gate_steps table LOG [--start EPOCH]  # each step's first and last sample, its span

`watch` appends a line per process of interest every --every seconds: the epoch second and the command line
(`make` targets, `docker build`, Horovod's builds, debootstrap, apt-get, pip, the tiers' pytest runs). `table`
names each step by the first pattern of STEPS its command line matches and prints when it was first and last
seen, in minutes from --start (the gate's start, in epoch seconds; default the first sample), and its span: the
steps overlap (the system set-up runs beside the venv and the first tiers), so the spans do not add up to the
whole; the sampling period bounds each figure's error.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

# (step, pattern): the first match names a sample; the order puts the specific before the general.
STEPS = [
    ("CUDA image: Horovod compiled for TensorFlow", r"build-horovod\.sh /opt/hvdbench/tf/"),
    ("CUDA image: Horovod compiled for PyTorch", r"build-horovod\.sh /opt/hvdbench/torch/"),
    ("CPU image: Horovod installed", r"build-horovod\.sh /opt/venv/"),
    ("venv: Horovod compiled", r"build-horovod\.sh .*\.venv"),
    ("cluster node image build", r"docker build .*docker/cluster/Dockerfile"),
    ("CUDA image build (with its self-test)", r"docker build .*Dockerfile\.cuda"),
    ("CPU image build (with its self-test)", r"docker build .*docker/Dockerfile "),
    ("Apptainer's root (debootstrap sid)", r"debootstrap .*apptainer"),
    ("Debian base (debootstrap bookworm)", r"debootstrap"),
    ("SIF builds", r"(apptainer|singularity) build"),
]
for tier in ("unit", "framework", "browser", "multiproc", "slurm", "image", "kubernetes", "cluster", "diagnose",
             "image_cuda", "apptainer", "sif_pull", "gpu_check"):
    STEPS.append((f"tier: {tier}", rf"pytest .*-m {tier}\b(?! and alone)"))
STEPS += [("tier: multiproc (alone)", r"pytest .*-m multiproc and alone"),
          ("make venv", r"^make --no-print-directory venv|^bash tools/setup\.sh"),
          ("system set-up: Docker, Slurm, the registry, the base (make test-system-install)",
           r"^make --no-print-directory test-system-install"),
          ("system set-up: the CUDA image (make test-system-cuda)", r"^make --no-print-directory test-system-cuda"),
          ("system set-up: the CPU and node images, Apptainer (make test-system-build)",
           r"^make --no-print-directory test-system-build"),
          ("system tiers (make test-system)", r"^make --no-print-directory test-system\b(?!-)"),
          ("make test", r"^make test\s*$")]
INTEREST = re.compile(r"^(/usr/bin/)?make |docker (buildx )?build|build-horovod|debootstrap|apptainer build|"
                      r"singularity build|pytest|apt-get|tools/setup\.sh|pip install")


def step_of(command: str) -> str | None:
    """The step a sampled command line is (the first pattern of STEPS it matches), or None."""
    return next((name for name, pattern in STEPS if re.search(pattern, command)), None)


def watch(log: Path, every: float) -> None:
    with open(log, "a") as out:
        while True:
            now = int(time.time())
            ps = subprocess.run(["ps", "-eo", "args", "--no-headers"], capture_output=True, text=True).stdout
            for line in ps.splitlines():
                if INTEREST.search(line) and "gate_steps" not in line:
                    out.write(f"{now} {line[:600]}\n")
            out.flush()
            time.sleep(every)


def table(log: Path, start: int | None = None) -> None:
    seen: dict[str, list[int]] = {}
    first = start
    for line in log.read_text(errors="replace").splitlines():
        stamp, _, command = line.partition(" ")
        if not stamp.isdigit():
            continue
        t = int(stamp)
        first = t if first is None else first if start is not None else min(first, t)
        step = step_of(command)
        if step is not None:
            seen.setdefault(step, []).append(t)
    if first is None:
        sys.exit(f"no samples in {log}")
    out = Table("step", "first seen (min)", "last seen (min)", "span (min)", title=f"{log}: steps by their samples")
    for step, times in sorted(seen.items(), key=lambda item: min(item[1])):
        a, b = min(times) - first, max(times) - first
        out.add_row(step, f"{a / 60:.1f}", f"{b / 60:.1f}", f"{(b - a) / 60:.1f}")
    Console(width=120).print(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    w = sub.add_parser("watch", help="sample the processes into LOG until stopped")
    w.add_argument("log", type=Path)
    w.add_argument("--every", type=float, default=5.0, help="seconds between samples (default 5)")
    t = sub.add_parser("table", help="the steps LOG's samples saw")
    t.add_argument("log", type=Path)
    t.add_argument("--start", type=int, help="the gate's start, epoch seconds (default: the first sample)")
    args = parser.parse_args()
    if args.what == "watch":
        try:
            watch(args.log, args.every)
        except KeyboardInterrupt:
            pass
    else:
        table(args.log, args.start)


if __name__ == "__main__":
    main()
