"""CPU cost of the telemetry sampler: CPU seconds it uses per second of wall time, per interval.

    python -m tools.benchmarks.telemetry_cost [--gpus 8] [--seconds 20] [--intervals 0.5,0.1]

Runs bench.measure.telemetry.Sampler against tests/fake_nvml.py (nvidia-ml-py's signatures, no GPU) while the
main thread sleeps, so the process's CPU time is the sampler's. The fake answers in Python, so the
figure bounds what the ctypes calls into a real driver cost in Python overhead, not the driver's own work.
"""

import argparse
import time

from rich.console import Console
from rich.table import Table

from bench.measure.telemetry import DEFAULT_INTERVAL_S, Sampler
from tests.fake_nvml import FakeGPU, FakeNVML


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--intervals", default=f"{DEFAULT_INTERVAL_S},0.1")
    a = p.parse_args()
    table = Table("interval s", "GPUs", "samples", "CPU ms per s", "CPU share of one core",
                  title=f"telemetry sampler cost (fake NVML, {a.seconds:g} s each)")
    for interval in (float(x) for x in a.intervals.split(",")):
        nvml = FakeNVML([FakeGPU() for _ in range(a.gpus)])
        sampler = Sampler(nvml, nvml.gpus, list(range(a.gpus)), interval, "bench")
        cpu0, wall0 = time.process_time(), time.perf_counter()
        sampler.start()
        time.sleep(a.seconds)
        sampler.stop()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        table.add_row(f"{interval:g}", str(a.gpus), str(len(sampler.samples)), f"{1000 * cpu / wall:.3f}",
                      f"{100 * cpu / wall:.3f}%")
    Console().print(table)


if __name__ == "__main__":
    main()
