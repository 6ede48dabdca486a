"""tools/compete.py, the busy loops the multiproc tier is proven beside: they run while the command does and are
gone however it ends."""

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT
from tests.multiproc import guards
from tools.benchmarks import endings
from tools.compete import SPIN


def children(parent: int) -> dict[int, str]:
    """{pid: command line} of ``parent``'s children."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found[int(proc.name)] = (proc / "cmdline").read_text().replace("\0", " ")
        except (OSError, ValueError):
            continue
    return found


def loops_of(parent: int) -> list[int]:
    """compete's busy loops: its children that are not the command."""
    return [pid for pid, line in children(parent).items() if SPIN in line]



def start(*command: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "tools.compete", "--procs", "2", "--", *command], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + guards.START_S
    while len(loops_of(proc.pid)) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, "the loops did not start"
        time.sleep(0.1)
    return proc


def test_the_loops_compete_while_the_command_runs_and_go_with_its_exit_code():
    proc = start(sys.executable, "-c", "import sys, time; time.sleep(2); sys.exit(3)")
    loops = loops_of(proc.pid)
    _, err = proc.communicate(timeout=guards.END_S)
    assert proc.returncode == 3 and "exit 3 after" in err and "beside 2 busy loop(s)" in err, err
    assert not [p for p in loops if endings.alive(p)]


def test_a_signal_stops_the_command_and_the_loops():
    proc = start("sleep", "600")
    loops = loops_of(proc.pid)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=guards.END_S)
    assert proc.returncode == 128 + signal.SIGTERM
    assert not [p for p in loops if endings.alive(p)]


def test_the_loops_and_the_command_die_with_compete_killed_outright():
    proc = start("sleep", "600")
    started = list(children(proc.pid))  # the loops and the command
    assert len(started) == 3
    proc.kill()
    proc.wait()
    assert endings.wait_gone(lambda: [p for p in started if endings.alive(p)], proc, guards.END_S) == []
