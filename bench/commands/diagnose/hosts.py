"""Where bench diagnose's phases run: the nodes of a Slurm allocation (each phase one or more srun steps), or
a host list without Slurm (ssh for one node, mpirun -H for several). Both give every command the same
interpreter path as this process: the nodes must hold the same installation (one image, or one shared
environment), as for any multi-node bench run. With ``--container`` (:class:`Commands`) every command runs
inside the container that command starts instead (``apptainer exec --nv hvdbench.sif``: the SIF users run), so
this process only starts the steps and reads what they wrote: it runs where srun (or ssh and mpirun) is, and
needs bench alone, without the frameworks.

Every command is started in a process group of its own and ended with it (SIGTERM, then SIGKILL), so a
diagnose that is stopped, or a step that runs past its time, leaves nothing running: srun ends its tasks
when it is terminated, mpirun its ranks, and ssh (``-tt``: the remote command has a terminal) closes the
connection, so the remote side gets SIGHUP, which bench takes as a stop; the remote command also runs under
``timeout``, in case the connection outlives it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bench.errors import Stopped
from bench.launching import envs
from bench.launching.supervise import stop_processes

GRACE_S = 10.0


@dataclass
class Step:
    """One command of a phase and where it runs (``members``: node names, or a pair)."""
    label: str
    members: tuple[str, ...]
    argv: list[str]
    log: Path
    proc: subprocess.Popen | None = None
    code: int | None = None
    timed_out: bool = False
    seconds: float = 0.0

    def failure(self) -> str | None:
        """None when it exited 0, else one line: why (the log's last line that says something)."""
        if self.code == 0 and not self.timed_out:
            return None
        last = ""
        try:
            lines = [ln.strip() for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
            errors = [ln for ln in lines if "error" in ln.lower()]
            last = (errors or lines or [""])[-1][:300]
        except OSError:
            pass
        what = "ran past its time limit" if self.timed_out else f"exited {self.code}"
        return f"{what}{': ' + last if last else ''} (log {self.log})"


def run_steps(steps: list[Step], timeout_s: float) -> None:
    """Start every step at once, wait for all (each at most ``timeout_s``); a stop signal ends them all."""
    start = time.monotonic()
    for s in steps:
        s.log.parent.mkdir(parents=True, exist_ok=True)
        with open(s.log, "w") as f:
            s.proc = subprocess.Popen(s.argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
    try:
        for s in steps:
            left = max(0.0, timeout_s - (time.monotonic() - start))
            try:
                s.code = s.proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                stop_processes([s.proc], GRACE_S)
                s.code, s.timed_out = s.proc.returncode, True
            s.seconds = time.monotonic() - start
    except Stopped:
        stop_processes([s.proc for s in steps if s.proc is not None], GRACE_S)
        raise


# A device's step inside a container: its python3 with the folder it starts in taken off sys.path first, so that a
# bench/ there (a checkout's; apptainer binds the current directory) cannot stand in for the container's bench, on
# any Python (-P, which does that for python_command, is 3.11's).
ALONE_IN_CONTAINER = ("python3", "-c", "import sys; sys.path = [p for p in sys.path if p not in ('', '.')]; "
                      "from bench.commands.diagnose.alone import main; main(sys.argv[1:])")


@dataclass(frozen=True)
class Commands:
    """How a step starts bench: this process's interpreter (``container`` empty), or ``bench`` inside the
    container that ``container`` starts (its words, e.g. ``apptainer exec --nv /shared/hvdbench.sif``)."""
    container: tuple[str, ...] = ()

    def bench(self, *args: str) -> list[str]:
        """``bench ARGS`` as a step runs it."""
        return [*self.container, "bench", *args] if self.container else [*envs.bench_command(), *args]

    def alone(self, *args: str) -> list[str]:
        """One device's step (bench.commands.diagnose.alone) as a step runs it."""
        if self.container:
            return [*self.container, *ALONE_IN_CONTAINER, *args]
        return [*envs.python_command(), "-m", "bench.commands.diagnose.alone", *args]


class Slurm:
    """Inside an allocation (salloc, sbatch): each command one srun step on the named nodes."""
    name = "slurm"

    def launchers(self, phases: tuple[str, ...]) -> tuple[str, ...]:
        """The commands this executor starts the steps of ``phases`` with."""
        del phases
        return ("srun",)

    def __init__(self, nodes: list[str], devices_per_node: int) -> None:
        self.nodes, self.dpn = nodes, devices_per_node

    def gone(self) -> str | None:
        """Why the allocation no longer runs (scancel, its time limit, salloc stopped), or None while it does:
        then a failed step is the allocation's end, not a node's fault. COMPLETING is an end too: a job whose
        allocation was revoked shows it while its steps die ("job N has expired")."""
        job = os.environ.get("SLURM_JOB_ID", "")
        try:
            state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True,
                                   timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return None  # cannot tell: the steps' own failures stand
        return None if state == "RUNNING" else f"the Slurm allocation {job} ended ({state or 'gone'})"

    def alone(self, node: str, argv: list[str]) -> list[str]:
        """``argv`` once per device of ``node``, each task on its own (bench.commands.diagnose.alone)."""
        return ["srun", "-N1", f"-n{self.dpn}", "-w", node, "--kill-on-bad-exit=0", *argv]

    def together(self, nodes: list[str], per_node: int, argv: list[str], mpi: bool = False) -> list[str]:
        """``argv`` as one job of ``per_node`` ranks on each of ``nodes`` (the launcher: srun)."""
        return ["srun", *(["--mpi=pmix"] if mpi else []), f"-N{len(nodes)}", f"-n{len(nodes) * per_node}",
                f"--ntasks-per-node={per_node}", "-w", ",".join(nodes), "--kill-on-bad-exit=1", *argv]


class HostList:
    """No Slurm: ssh for one node, mpirun -H for a job over several (torch.distributed's rendezvous on the
    first host, at ``port``)."""
    name = "hosts"

    def __init__(self, nodes: list[str], devices_per_node: int, port: int, timeout_s: float) -> None:

        self.nodes, self.dpn, self.port, self.timeout_s = nodes, devices_per_node, port, timeout_s

    def launchers(self, phases: tuple[str, ...]) -> tuple[str, ...]:
        return ("ssh", *(["mpirun"] if {"network", "job"} & set(phases) else []))

    def gone(self) -> str | None:
        return None  # no allocation: each host's failure is its own

    def alone(self, node: str, argv: list[str]) -> list[str]:
        remote = " ".join(shlex.quote(a) for a in argv)
        one = f"timeout -k 10 {int(self.timeout_s)} {remote}"
        if self.dpn == 1:
            line = one
        else:  # one task per device, as srun -n starts them, and every task's status, not only the last
            line = ("pids=; " + "; ".join(f"(HVDBENCH_DIAGNOSE_DEVICE={i} {one}) & pids=\"$pids $!\""
                                          for i in range(self.dpn))
                    + "; rc=0; for p in $pids; do wait $p || rc=$?; done; exit $rc")
        return ["ssh", "-tt", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", node, f"cd {shlex.quote(os.getcwd())} "
                f"&& {line}"]

    def together(self, nodes: list[str], per_node: int, argv: list[str], mpi: bool = False) -> list[str]:
        del mpi  # mpirun is MPI's own launcher
        return ["mpirun", "-H", ",".join(f"{n}:{per_node}" for n in nodes), "-np", str(len(nodes) * per_node),
                "--bind-to", "none", "-x", f"MASTER_ADDR={nodes[0]}", "-x", f"MASTER_PORT={self.port}",
                "-x", "PATH", "-wdir", os.getcwd(), *argv]
