#!/usr/bin/env python3
"""Run a command beside processes that compete for the CPU, as a shared login node or a busy laptop would.

    python -m tools.compete [--procs 2] -- make test-multiproc

Starts --procs busy loops (each a Python process spinning at the same priority as the command, one per core it is
to take), runs the command, and stops the loops however the command ends (done, failed, Ctrl-C or SIGTERM to this
process, passed on to the command); killed outright, this process takes its loops with it (SIGKILL, the
parent-death signal) and the command gets a SIGTERM to stop on. Prints the command's
wall time and the CPU time the loops took over it (what the command did not get), and exits with the command's
exit code. The multiproc tier is meant to pass beside it (tests/multiproc/guards.py).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time

SPIN = "while True: pass"
PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """In the child, before exec: ``signum`` when the process that started it goes (Linux's prctl)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signum)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of ``pid`` from /proc (0 once it is gone)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=2, help="busy loops beside the command (default 2)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run (give it after --)")
    if args.procs < 1:
        parser.error(f"--procs must be >= 1 (got {args.procs})")
    stopped: dict[str, int] = {}
    child: subprocess.Popen | None = None

    def stop(signum, _frame):
        stopped["signal"] = signum
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    # before anything starts: a signal that comes while the loops or the command start is passed on, never lost
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, stop)
    loops = [subprocess.Popen([sys.executable, "-c", SPIN], preexec_fn=die_with_parent) for _ in range(args.procs)]
    start = time.monotonic()
    try:
        code = 128 + stopped["signal"] if "signal" in stopped else None
        if code is None:
            child = subprocess.Popen(command, preexec_fn=lambda: die_with_parent(signal.SIGTERM))
            if "signal" in stopped and child.poll() is None:  # it came while the command started
                child.send_signal(stopped["signal"])
            code = child.wait()
    except FileNotFoundError:
        print(f"compete: no such command: {command[0]}", file=sys.stderr)
        code = 127
    finally:
        burnt = sum(cpu_seconds(p.pid) for p in loops)
        for p in loops:
            p.kill()
            p.wait()
    wall = time.monotonic() - start
    print(f"compete: {' '.join(command)}: exit {code} after {wall:.0f} s beside {args.procs} busy loop(s), which "
          f"took {burnt:.0f} s of CPU ({burnt / wall if wall else 0:.2f} cores)", file=sys.stderr)
    if "signal" in stopped:
        return 128 + stopped["signal"]
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
