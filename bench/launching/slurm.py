"""Slurm: what a job step's task can read about the step from its environment, and how bench starts steps.

The node list expanded, the tasks on each node, the host of every rank, and whether those hosts still
answer; each job's rendezvous port range; the srun command of one step; the job's time limit after a SIGTERM.

Slurm places a step's tasks in node-list order under its default block distribution: the first node's
tasks are ranks 0..k-1, the next node's follow. The stall watchdog asks here which hosts of the step stopped
answering: a TCP connection to each other host's slurmd (port 6818, Slurm's default), which runs on every
node of an allocation, answers while the node and its link are up.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from bench.errors import BenchError

SLURMD_PORT = 6818


def expand_nodelist(nodelist: str) -> list[str]:
    """'node[01-03,7],gpu1' -> ['node01', 'node02', 'node03', 'node7', 'gpu1'] (one bracket per name)."""
    hosts = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\]([^,\[]*))?(?:,|$)", nodelist.strip()):
        prefix, ranges, suffix = m.group(1), m.group(2), m.group(3) or ""
        if not ranges:
            hosts.append(prefix)
            continue
        for part in ranges.split(","):
            first, _, last = part.partition("-")
            width = len(first)
            for i in range(int(first), int(last or first) + 1):
                hosts.append(f"{prefix}{i:0{width}d}{suffix}")
    return hosts


def expand_counts(text: str) -> list[int]:
    """Slurm's task counts per node: '2(x3),1' -> [2, 2, 2, 1]."""
    counts = []
    for part in text.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise ValueError(f"not a Slurm task count list: {text!r}")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def rank_hosts(env) -> list[str] | None:
    """The host of every rank of this step (block distribution), or None when the environment does not say."""
    nodelist = env.get("SLURM_STEP_NODELIST")
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE")
    if not nodelist or not per_node or not env.get("SLURM_DISTRIBUTION", "block").startswith("block"):
        return None
    try:
        hosts, counts = expand_nodelist(nodelist), expand_counts(per_node)
    except ValueError:
        return None
    if len(hosts) != len(counts):
        return None
    return [host for host, n in zip(hosts, counts, strict=True) for _ in range(n)]


def silent_hosts(hosts: list[str], port: int = SLURMD_PORT, timeout_s: float = 2.0) -> list[str]:
    """The hosts among ``hosts`` where nothing accepts a TCP connection on ``port`` within ``timeout_s``."""
    def silent(host: str) -> bool:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            return False
        except OSError:
            return True

    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        return [h for h, quiet in zip(hosts, pool.map(silent, hosts), strict=True) if quiet]


def unanswered(env, own_rank: int, port: int = SLURMD_PORT) -> str:
    """'; no answer from node2 (rank 1)' for the other hosts of this step that stopped answering, else ''."""
    ranks = rank_hosts(env)
    if not ranks or not 0 <= own_rank < len(ranks):
        return ""
    others = sorted({h for h in ranks if h != ranks[own_rank]})
    quiet = silent_hosts(others, port)
    if not quiet:
        return ""
    def with_ranks(host: str) -> str:
        on = [str(r) for r, x in enumerate(ranks) if x == host]
        return f"{host} ({'rank' if len(on) == 1 else 'ranks'} {', '.join(on)})"

    named = [with_ranks(h) for h in quiet]
    return f"; no answer from {', '.join(named)} (node or link down)"


def inside_allocation() -> bool:
    """In a Slurm allocation (salloc's shell, an sbatch script) but not in one of its job steps: runs that
    start their own ranks start them with srun, on the allocation's nodes."""
    return "SLURM_JOB_ID" in os.environ and "SLURM_STEP_ID" not in os.environ


def slurm_time_limit(environ=os.environ, now: float | None = None, run=subprocess.run) -> str | None:
    """Under Slurm, after a SIGTERM: "the job's time limit (LIMIT) was reached" when this job's end time has come,
    else None (another sender: scancel, a user). Slurm 22.05 exports no end time to the job, so squeue says it;
    no answer within 3 s (no squeue, the controller unreachable) is None."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        # --states=all: at the SIGTERM the job may already be in state TIMEOUT, which squeue hides by default
        out = run(["squeue", "-h", "-t", "all", "-j", job, "-o", "%e|%l"], capture_output=True, text=True,
                  timeout=3).stdout
        end, limit = out.strip().splitlines()[0].split("|")
        from datetime import datetime

        ends = datetime.fromisoformat(end).timestamp()
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None
    return f"the job's Slurm time limit ({limit}) was reached" if (now or time.time()) >= ends - 1 else None


# Each Slurm job's rendezvous ports: a range of its own, JOB_PORTS wide, from PORT_BASE, so that jobs sharing a
# node never share a port. tf-native under srun takes the range's first ports, one per task on the node
# (TensorFlow's SlurmClusterResolver); torch.distributed and the batch scripts take its first. The ranges stay
# below Linux's ephemeral ports (32768 and up). singularity/slurm/common.sh computes the same.
PORT_BASE, JOB_PORTS, PORT_RANGES = 20000, 64, 190


def job_port_base(job_id: int) -> int:
    """The first port of Slurm job ``job_id``'s range: 20000 + 64 x (job id mod 190); two jobs share a range
    only when their ids differ by a multiple of 190. (With one port per job, job N's second task and job
    N+1's first took the same port: a concurrent tf-native job failed to start its gRPC server.)"""
    return PORT_BASE + JOB_PORTS * (job_id % PORT_RANGES)


def srun_command(v, np_: int, argv: list[str], num_ps: int | None = None) -> list[str]:
    """One job step running ``argv`` as the processes of variant ``v`` (a bench.modes.Variant) at ``np_`` ranks:
    MPI modes join through PMIx, and the step ends as soon as one task fails."""
    mpi = ["--mpi=pmix"] if v.mode.needs_mpi else []
    return ["srun", *mpi, "--kill-on-bad-exit=1", "-n", str(v.processes(np_, num_ps or 1)), *argv]


def first_slurm_host(nodelist: str) -> str:
    """First hostname of a Slurm node list such as 'node[03-05,7],gpu1' -> 'node03' ('n[1-2]-ib' -> 'n1-ib')."""
    try:
        hosts = expand_nodelist(nodelist)
    except ValueError:
        hosts = []
    if not hosts or not hosts[0]:
        raise BenchError(f"malformed launcher environment: cannot parse Slurm node list {nodelist!r}")
    return hosts[0]

