"""What a task of a Slurm job step can read about the step from its environment: the node list expanded, the
tasks on each node, the host of every rank, and whether those hosts still answer.

Slurm places a step's tasks in node-list order under its default block distribution: the first node's
tasks are ranks 0..k-1, the next node's follow. The stall watchdog asks here which hosts of the step stopped
answering: a TCP connection to each other host's slurmd (port 6818, Slurm's default), which runs on every
node of an allocation, answers while the node and its link are up.
"""

from __future__ import annotations

import re
import socket
from concurrent.futures import ThreadPoolExecutor

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
