"""Which launcher started this process, and what it says about the group: detection from the environment.

Detection order (first match wins; an outer launcher is never spawned again):

==============  =====================================================================
launcher        environment it leaves in each process
==============  =====================================================================
self            HVDBENCH_LAUNCHER=self plus torchrun-style or Horovod-style rank variables
torchrun        TORCHELASTIC_RUN_ID, RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT
horovodrun      HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK (Gloo controller)
mpirun          OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK (Open MPI), or PMI_RANK/PMI_SIZE
srun            SLURM_STEP_ID with SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
tf-config       TF_CONFIG alone (tf-native's roles: chief, worker, ps)
none            nothing of the above: this process is the parent and spawns the ranks
==============  =====================================================================
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass, replace

from bench.errors import BenchError
from bench.launching.slurm import first_slurm_host, job_port_base


@dataclass(frozen=True)
class LaunchInfo:
    launcher: str  # self | torchrun | horovodrun | mpirun | srun | none
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    master_addr: str | None = None
    master_port: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _int(env: dict[str, str], name: str) -> int:
    value = env.get(name)
    if value is None:
        raise BenchError(f"malformed launcher environment: {name} is not set")
    try:
        return int(value)
    except ValueError:
        raise BenchError(f"malformed launcher environment: {name}={value!r} is not an integer") from None


def _port(env: dict[str, str]) -> int | None:
    if "MASTER_PORT" not in env:
        return None
    port = _int(env, "MASTER_PORT")
    if not 0 < port < 65536:
        raise BenchError(f"malformed launcher environment: MASTER_PORT={port} is not a TCP port")
    return port


def parse_tf_config(text: str) -> tuple[dict[str, list[str]], str, int]:
    """(cluster, task type, task index) from a TF_CONFIG value, or one clear error."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BenchError(f"malformed TF_CONFIG: not JSON ({exc.msg})") from None
    if not (isinstance(data, dict) and isinstance(data.get("cluster"), dict) and isinstance(data.get("task"), dict)):
        raise BenchError("malformed TF_CONFIG: needs an object with 'cluster' and 'task'")
    cluster = data["cluster"]
    for job, hosts in cluster.items():
        if job not in ("chief", "worker", "ps", "evaluator") or not isinstance(hosts, list) or not all(
                isinstance(h, str) and ":" in h for h in hosts):
            raise BenchError(f"malformed TF_CONFIG: cluster job '{job}' must be a list of 'host:port'")
    task_type, task_index = data["task"].get("type"), data["task"].get("index", 0)
    if task_type not in cluster or not isinstance(task_index, int) or not 0 <= task_index < len(cluster[task_type]):
        raise BenchError(f"malformed TF_CONFIG: task {task_type!r} index {task_index!r} is not in the cluster")
    return cluster, task_type, task_index



def expand_tasks_per_node(spec: str) -> list[int]:
    """Slurm's compressed tasks-per-node list, one entry per node: "8(x2),3" -> [8, 8, 3]."""
    counts = []
    for part in spec.split(","):
        count, _, repeat = part.strip().partition("(x")
        counts += [int(count)] * (int(repeat.rstrip(")")) if repeat else 1)
    return counts


def slurm_tasks_on_this_node(env: dict[str, str]) -> int:
    """Tasks of this srun step on this node: the step's own layout (SLURM_STEP_TASKS_PER_NODE, e.g. "8(x2)", at
    SLURM_NODEID), which srun sets however the tasks were asked for (``-N2 -n16`` has no --ntasks-per-node, and
    the job-wide SLURM_NTASKS would claim all 16 on one node); else --ntasks-per-node; else the step's tasks."""
    try:
        counts = expand_tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE", ""))
        node = int(env.get("SLURM_NODEID", "0"))
        if 0 <= node < len(counts):
            return counts[node]
    except ValueError:
        pass
    per_node = env.get("SLURM_NTASKS_PER_NODE", "").split("(")[0]
    return int(per_node) if per_node.isdigit() and int(per_node) > 0 else _int(env, "SLURM_NTASKS")


def detect(env: dict[str, str] | None = None) -> LaunchInfo:
    env = dict(os.environ if env is None else env)
    self_spawned = env.get("HVDBENCH_LAUNCHER") == "self"
    if "TORCHELASTIC_RUN_ID" in env or (self_spawned and "RANK" in env):
        info = LaunchInfo("torchrun", _int(env, "RANK"), _int(env, "WORLD_SIZE"), _int(env, "LOCAL_RANK"),
                          _int(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else 1,
                          env.get("MASTER_ADDR"), _port(env))
    elif "HOROVOD_RANK" in env:
        info = LaunchInfo("horovodrun", _int(env, "HOROVOD_RANK"), _int(env, "HOROVOD_SIZE"),
                          _int(env, "HOROVOD_LOCAL_RANK"), _int(env, "HOROVOD_LOCAL_SIZE"),
                          env.get("MASTER_ADDR"), _port(env))
    elif "OMPI_COMM_WORLD_RANK" in env:
        info = LaunchInfo("mpirun", _int(env, "OMPI_COMM_WORLD_RANK"), _int(env, "OMPI_COMM_WORLD_SIZE"),
                          _int(env, "OMPI_COMM_WORLD_LOCAL_RANK"), _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE"),
                          env.get("MASTER_ADDR"), _port(env))
    elif "PMI_RANK" in env and "PMI_SIZE" in env:
        info = LaunchInfo("mpirun", _int(env, "PMI_RANK"), _int(env, "PMI_SIZE"),
                          int(env.get("MPI_LOCALRANKID", "0")), int(env.get("MPI_LOCALNRANKS", "1")),
                          env.get("MASTER_ADDR"), _port(env))
    elif "SLURM_STEP_ID" in env and "SLURM_PROCID" in env:
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "localhost"
        job = int(env.get("SLURM_JOB_ID", "0") or 0)
        info = LaunchInfo("srun", _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS"),
                          _int(env, "SLURM_LOCALID"), slurm_tasks_on_this_node(env),
                          env.get("MASTER_ADDR") or first_slurm_host(nodelist),
                          _port(env) or job_port_base(job))
    elif "TF_CONFIG" in env:
        cluster, task_type, task_index = parse_tf_config(env["TF_CONFIG"])
        workers = cluster.get("chief", []) + cluster.get("worker", [])
        rank = (0 if task_type == "chief" else len(cluster.get("chief", [])) + task_index) \
            if task_type in ("chief", "worker") else len(workers) + task_index
        info = LaunchInfo("tf-config", rank, len(workers) + len(cluster.get("ps", [])), 0, 1)
    elif self_spawned:
        raise BenchError("malformed launcher environment: HVDBENCH_LAUNCHER=self without rank variables")
    else:
        return LaunchInfo("none")
    if self_spawned:
        info = replace(info, launcher="self")
    if info.world_size < 1 or not 0 <= info.rank < info.world_size:
        raise BenchError(f"malformed launcher environment ({info.launcher}): rank {info.rank} "
                         f"is not in [0, {info.world_size})")
    if info.local_rank < 0:
        raise BenchError(f"malformed launcher environment ({info.launcher}): local rank {info.local_rank} < 0")
    return info


def resolve_error(name: str) -> str | None:
    """Why host name ``name`` does not resolve to an address (getaddrinfo's message), or None if it does."""
    try:
        socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        return getattr(exc, "strerror", None) or str(exc)
    return None


def validate_rendezvous(info: LaunchInfo, env: dict[str, str] | None = None) -> None:
    """Check the rendezvous addresses a rank got from its environment before anything waits on them:
    MASTER_ADDR (torch.distributed; under srun the node list's first host), every host:port of TF_CONFIG,
    and Horovod's Gloo rendezvous address. A malformed port or a host name that does not resolve is one
    clear error now, instead of a wait until the rendezvous timeout (or forever)."""
    env = dict(os.environ if env is None else env)
    checks: list[tuple[str, str]] = []
    if info.master_addr:
        checks.append(("MASTER_ADDR" if env.get("MASTER_ADDR") else "the Slurm node list's first host",
                       info.master_addr))
    if "TF_CONFIG" in env:
        cluster, _, _ = parse_tf_config(env["TF_CONFIG"])
        for job, hosts in cluster.items():
            for address in hosts:
                host, _, port = address.rpartition(":")
                if not port.isdigit() or not 0 < int(port) < 65536:
                    raise BenchError(f"malformed TF_CONFIG: {job} address {address!r} has no valid port")
                checks.append((f"TF_CONFIG {job} address", host.strip("[]")))
    if "HOROVOD_GLOO_RENDEZVOUS_ADDR" in env:
        port = env.get("HOROVOD_GLOO_RENDEZVOUS_PORT", "")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise BenchError(f"malformed launcher environment: HOROVOD_GLOO_RENDEZVOUS_PORT={port!r} is not a TCP port")
        checks.append(("HOROVOD_GLOO_RENDEZVOUS_ADDR", env["HOROVOD_GLOO_RENDEZVOUS_ADDR"]))
    for what, host in checks:
        why = resolve_error(host)
        if why:
            raise BenchError(f"rendezvous address from the environment does not resolve: {what} {host!r} ({why})")


def check_gpus_per_node(info: LaunchInfo, gpus: int, env: dict[str, str] | None = None) -> None:
    """Under an outer launcher, one GPU per local rank: more ranks than visible GPUs means sharing."""
    env = dict(os.environ if env is None else env)
    if info.launcher == "none" or info.local_world_size <= gpus:
        return
    if gpus == 1 and env.get("SLURM_GPUS_PER_TASK"):
        return  # Slurm bound one GPU to each task: every rank sees its own as device 0
    raise BenchError(f"{info.local_world_size} ranks on this node but {gpus} GPU(s) visible to each: ranks would "
                     "share GPUs. Start one task per GPU (--ntasks-per-node equal to --gpus-per-node, or "
                     "srun --gpus-per-task=1)")


def own_gpu_indices(info: LaunchInfo, device_count: int) -> list[int]:
    """The CUDA index this rank drives: local rank r pins device r mod the device count (as each mode pins)."""
    return [info.local_rank % device_count] if device_count else []

