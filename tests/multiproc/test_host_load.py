"""Other processes on the node, for real: a run beside a busy core says how much it took and warns in one line,
and a process's tree counts its children's CPU time, alive and reaped (bench.measure.host_load)."""

import os
import subprocess
import sys

import pytest

from bench.measure import host_load
from tests.conftest import SMALL, bench, only_result

TICK = os.sysconf("SC_CLK_TCK")
SPIN = "while True: pass"


@pytest.mark.alone  # the hog is to be the one other process keeping a core busy
def test_a_run_beside_a_busy_core_measures_the_core_taken_and_warns_once(out):
    hog = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        # One intra-op thread: two would wait on the one parked behind the hog (docs/development.md).
        r = bench("torch-single", *SMALL[:-4], "--steps-per-window", "4", "--windows", "3", "--output", str(out),
                  OMP_NUM_THREADS="1")
    finally:
        hog.kill()
        hog.wait()
    assert r.returncode == 0, r.stderr
    load = only_result(out)["host_load"]
    (host,) = load["hosts"]
    assert host["ranks"] == 1 and host["cpus"] >= 1
    # The hog spins a whole core whenever the scheduler lets it: at least two thirds of one on a busy 2-core CI
    # machine with the run beside it. The rank's one thread computes through its windows.
    assert load["other_cores_max"] == host["other_cores"] >= host_load.WARN_CORES, load
    assert host["run_cores"] > 0.2, load
    assert host["busy_cores"] >= host["run_cores"] + host["other_cores"] - 1e-9
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning: other processes kept")]
    assert len(warnings) == 1, r.stderr
    assert "cores busy while the windows ran" in warnings[0] and "Traceback" not in r.stderr


def test_a_process_tree_counts_a_childs_cpu_time_while_it_lives_and_after_it_is_reaped():
    before = host_load.tree_ticks()
    # The child spins until it has used 0.5 s of CPU (however busy the machine), says so, and waits to be told.
    child = subprocess.Popen([sys.executable, "-c", "import sys, time\nwhile time.process_time() < 0.5: pass\n"
                              "print('done', flush=True)\nsys.stdin.readline()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "done"
        alive = host_load.tree_ticks()
    finally:
        child.stdin.close()
        child.wait()
    reaped = host_load.tree_ticks()
    # 0.5 s of the child's CPU, less a tick of rounding; the interpreter's start-up adds more
    assert alive - before >= 0.5 * TICK - 1
    assert reaped >= alive  # the reaped child's time moved into this process's cutime, none lost
