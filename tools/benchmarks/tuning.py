"""The tuned profile and Horovod's knobs on this machine: what each setting does to throughput and init at np 2.

    python -m tools.benchmarks.tuning [--study profile|knobs|xla|all] [--model resnet50] [--repeats 3]
                                      [-- more bench arguments]

``profile``: torch-ddp with the paper's settings, --tuned, and each of --tuned's model settings alone (--compile
default, --fused-optimizer, --channels-last), so the table says what each part adds. ``knobs``: torch-horovod
with Horovod's defaults (fusion buffer 128 MiB, cycle 1 ms), fusion off (--fusion-threshold 0), a 1 MiB buffer,
and a 5 ms cycle. ``xla``: tf-horovod and tf-native (multiworker) without and with --xla (the tuned profile's
TensorFlow compiler). Within a repeat every setting runs once, in an order rotated by one per repeat (alternated:
drift on the shared host falls on every setting alike); the table has the median throughput over the repeats, its
spread (min-max), the median init and, for compiled runs, the median compile_s and the first (cold cache) run's.
A compiled run's first repeat compiles cold; later repeats read TorchInductor's cache (/tmp/torchinductor_<user>),
as a user's second run does (XLA keeps no cache between runs: every --xla run compiles). The batch is the CPU
profile's for every setting (--tuned's batch 256 is a GPU's).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.records.results import load_result
from bench.records.schema import Result

PROFILE = {"paper": ("torch-ddp", []),
           "tuned": ("torch-ddp", ["--tuned"]),
           "compile only": ("torch-ddp", ["--compile", "default"]),
           "fused optimizer only": ("torch-ddp", ["--fused-optimizer"]),
           "channels-last only": ("torch-ddp", ["--channels-last"])}
KNOBS = {"Horovod's defaults": ("torch-horovod", []),
         "fusion off": ("torch-horovod", ["--fusion-threshold", "0"]),
         "fusion 1 MiB": ("torch-horovod", ["--fusion-threshold", "1M"]),
         "cycle 5 ms": ("torch-horovod", ["--cycle-time", "5"])}

XLA = {"tf-horovod": ("tf-horovod", []),
       "tf-horovod --xla": ("tf-horovod", ["--xla"]),
       "tf-native": ("tf-native", []),
       "tf-native --xla": ("tf-native", ["--xla"])}
STUDIES = {"profile": (PROFILE, "torch-ddp np 2: paper and tuned"),
           "knobs": (KNOBS, "torch-horovod np 2: Horovod's knobs"),
           "xla": (XLA, "TensorFlow np 2: without and with XLA")}


def run(mode: str, args: list[str], out: Path) -> Result:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "bench", mode, "--np", "2", "--output", str(out), *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (path,) = out.glob("*.json")
    return load_result(path)


def study(settings: dict[str, tuple[str, list[str]]], extra: list[str], repeats: int, title: str) -> Table:
    names = list(settings)
    results: dict[str, list[Result]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(repeats):
            for name in names[repeat % len(names):] + names[:repeat % len(names)]:
                mode, args = settings[name]
                results[name].append(run(mode, [*args, *extra], Path(tmp) / f"{repeat}-{names.index(name)}"))
    table = Table("setting", "img/s (median)", "min-max", "vs first row", "init s", "compile s (median)",
                  "compile s (first run)", "graphs in windows", title=title)
    base = statistics.median(r.summary.samples_per_sec_total for r in results[names[0]])
    for name in names:
        rates = [r.summary.samples_per_sec_total for r in results[name]]
        compiles = [r.timing.compile_s for r in results[name] if r.timing.compile_s is not None]  # compiled runs
        graphs = {r.timing.graphs_compiled_in_windows for r in results[name]}
        median = statistics.median(rates)
        table.add_row(name, f"{median:.1f}", f"{min(rates):.1f}-{max(rates):.1f}", f"{median / base - 1:+.1%}",
                      f"{statistics.median(r.timing.init_s for r in results[name]):.1f}",
                      f"{statistics.median(compiles):.1f}" if compiles else "-",
                      f"{compiles[0]:.1f}" if compiles else "-",
                      ", ".join(str(g) for g in sorted(graphs, key=str)))
    return table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--study", choices=(*STUDIES, "both", "all"), default="both",
                   help="both: profile and knobs (the PyTorch studies); all: every study")
    p.add_argument("--model", default="resnet50")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("extra", nargs="*", help="more bench arguments (after --)")
    a = p.parse_args()
    extra = ["--model", a.model, "--no-telemetry", "--attribution-steps", "0", *a.extra]
    console = Console(width=200)
    chosen = {"both": ["profile", "knobs"], "all": list(STUDIES)}.get(a.study, [a.study])
    for name in chosen:
        settings, title = STUDIES[name]
        console.print(study(settings, extra, a.repeats, f"{title} ({' '.join(extra)}), {a.repeats} alternated repeats"))


if __name__ == "__main__":
    main()
