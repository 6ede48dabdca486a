"""How processes start: detect an outer launcher from the environment, or spawn the ranks ourselves.

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
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from bench import slurmenv, watchdog
from bench.distributed import cpu_thread_share
from bench.errors import STOP_SIGNALS, BenchError, ResultNotWhole, Stopped, restore_handlers, stop_on_signals

CHILD_CONFIG_ENV = "HVDBENCH_CONFIG"
LAUNCH_TIME_ENV = "HVDBENCH_LAUNCH_TIME"
# Set beside OMP_NUM_THREADS when the spawner chose it (each rank's core share), so that a mode can tell
# the spawner's share from a thread count the user asked for.
THREAD_SHARE_ENV = "HVDBENCH_THREAD_SHARE"
# The spawner's pid: each rank asks the kernel to SIGKILL it when that process dies (see die_with_parent).
PARENT_PID_ENV = "HVDBENCH_PARENT_PID"
# The sweep's pid, set for each cell it runs (see die_with_parent).
SWEEP_PID_ENV = "HVDBENCH_SWEEP_PID"
PR_SET_PDEATHSIG = 1


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
        hosts = slurmenv.expand_nodelist(nodelist)
    except ValueError:
        hosts = []
    if not hosts or not hosts[0]:
        raise BenchError(f"malformed launcher environment: cannot parse Slurm node list {nodelist!r}")
    return hosts[0]


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
                          _int(env, "SLURM_LOCALID"),
                          int(env.get("SLURM_NTASKS_PER_NODE", "0").split("(")[0] or 0)
                          or _int(env, "SLURM_NTASKS"),
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


def local_gpu_indices(info: LaunchInfo, device_count: int) -> list[int]:
    """CUDA indices this node's ranks use: local rank r pins device r mod the device count."""
    return sorted({r % device_count for r in range(max(1, info.local_world_size))}) if device_count else []


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_argv(argv: list[str]) -> list[str]:
    """The command each spawned rank runs: this same bench invocation."""
    return [sys.executable, "-m", "bench", *argv]


def spawn_local(argv: list[str], np: int, config_json: str, grace_s: float = 10.0) -> int:
    """Start ``np`` ranks of ``bench`` on this host with a TCP rendezvous on 127.0.0.1 (torch.distributed
    and TF_CONFIG style: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT); wait for all."""
    port = free_port()
    common = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(np),
              "LOCAL_WORLD_SIZE": str(np)}
    envs = [dict(common, RANK=str(r), LOCAL_RANK=str(r)) for r in range(np)]
    return spawn(argv, envs, config_json, grace_s)


def spawn(argv: list[str], rank_envs: list[dict[str, str]], config_json: str, grace_s: float = 10.0,
          servers: frozenset[int] = frozenset()) -> int:
    """Start one ``bench`` process per entry of ``rank_envs`` (process i gets rank_envs[i]) and wait.

    Every process leads its own process group. If any exits non-zero, the others are stopped (SIGTERM to each
    group, SIGKILL after ``grace_s``) and a BenchError names the rank that failed first; a rank's stall report
    (bench.watchdog) names the ranks that did not arrive. SIGINT, SIGTERM or SIGHUP to this process stops every
    rank the same way and raises :class:`Stopped`. Each rank also dies with this process if it is killed
    outright (die_with_parent). ``servers`` (indexes) serve until stopped, such as parameter servers: they are
    stopped once every other process has succeeded. Returns 0 on success.
    """
    import tempfile

    base = dict(os.environ, HVDBENCH_LAUNCHER="self", PYTHONUNBUFFERED="1", **{CHILD_CONFIG_ENV: config_json},
                **{PARENT_PID_ENV: str(os.getpid())})
    # Like torchrun: each rank gets its share of the cores before any library sizes its thread pools.
    if "OMP_NUM_THREADS" not in base:
        base["OMP_NUM_THREADS"] = base[THREAD_SHARE_ENV] = str(cpu_thread_share(len(rank_envs)))
    procs: list[subprocess.Popen] = []
    old = stop_on_signals()
    with tempfile.TemporaryDirectory(prefix="hvdbench-stall-") as stall_dir:
        base[watchdog.STALL_DIR_ENV] = stall_dir
        try:
            oom_before = oom_kills()  # a rank killed by SIGKILL later: was it the out-of-memory killer?
            for env in rank_envs:
                procs.append(subprocess.Popen(child_argv(argv), env=dict(base, **env), start_new_session=True))
            return wait_all(procs, grace_s, servers, Path(stall_dir), oom_before)
        except Stopped as exc:
            stop_processes(procs, grace_s)
            raise Stopped(exc.signum, f"all {len(procs)} process(es) stopped, no result written") from None
        finally:
            restore_handlers(old)


def die_with_parent(env: dict[str, str] | None = None) -> None:
    """Have the kernel SIGKILL this process when the process that started it dies (even by SIGKILL, which
    that process cannot catch to stop its children), so that nothing outlives the job:

    * a self-spawned rank dies with its spawner (HVDBENCH_PARENT_PID);
    * a sweep's cell dies with the sweep (HVDBENCH_SWEEP_PID), when the sweep started it directly (a cell
      under srun is the task of a Slurm step, which Slurm ends).
    """
    env = os.environ if env is None else env
    if not sys.platform.startswith("linux"):
        return
    parent = env.get(PARENT_PID_ENV) if env.get("HVDBENCH_LAUNCHER") == "self" else None
    sweep = env.get(SWEEP_PID_ENV)
    if parent is None and not (sweep and sweep.isdigit() and os.getppid() == int(sweep)):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != int(parent):  # the spawner died before the request took effect
        os._exit(128 + signal.SIGKILL)


def spawn_horovod_gloo(mode: str, np: int, config_json: str, timeout_s: float) -> int:
    """Start ``np`` Horovod ranks on this host with the Gloo controller, watched by :func:`spawn`.

    The set-up horovodrun's Gloo path makes (its HTTP rendezvous server and host assignment), without
    horovodrun's own supervisor, so a failure is reported in one line and stops every rank.
    """
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.http.http_server import RendezvousServer

    server = RendezvousServer()
    port = server.start()
    try:
        plan = get_host_assignments(parse_hosts(f"localhost:{np}"), np)
        server.init(plan)
        common = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
                  "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo", "HOROVOD_GLOO_IFACE": "lo",
                  "HOROVOD_GLOO_TIMEOUT_SECONDS": str(int(timeout_s))}
        envs = [dict(common, HOROVOD_HOSTNAME=s.hostname, HOROVOD_RANK=str(s.rank), HOROVOD_SIZE=str(s.size),
                     HOROVOD_LOCAL_RANK=str(s.local_rank), HOROVOD_LOCAL_SIZE=str(s.local_size),
                     HOROVOD_CROSS_RANK=str(s.cross_rank), HOROVOD_CROSS_SIZE=str(s.cross_size))
                for s in plan]
        return spawn([mode], envs, config_json)
    finally:
        server.stop()


def oom_kills() -> int | None:
    """The kernel's count of processes its out-of-memory killer has ended (/proc/vmstat oom_kill: machine-wide,
    the memory limits of cgroups and containers included), or None where the kernel does not say."""
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def killed_how(signum: int, oom_before: int | None) -> str:
    """'was killed by signal N', with the likely cause when it was SIGKILL: the out-of-memory killer."""
    try:
        text = f"was killed by signal {signum} ({signal.Signals(signum).name})"
    except ValueError:
        text = f"was killed by signal {signum}"
    if signum != signal.SIGKILL:
        return text
    after = oom_kills()
    if oom_before is not None and after is not None and after > oom_before:
        return (f"{text}: the kernel's out-of-memory killer ended it (the memory limit of its container or "
                "cgroup, or of the machine)")
    return f"{text}; if nobody killed it, likely out of memory"


def wait_all(procs: list[subprocess.Popen], grace_s: float = 10.0, servers: frozenset[int] = frozenset(),
             stall_dir: Path | None = None, oom_before: int | None = None) -> int:
    """Wait for every process; on the first failure stop the rest and name the culprit.

    Among ranks found failed in the same poll, one killed by a signal is named first: a rank that
    lost its peer exits with an error, the peer that was killed is the cause. A rank that exits with
    bench.watchdog.STALL_EXIT reported a stall: the other ranks get a few seconds to report theirs, then
    the reports name the ranks that did not arrive.
    """
    while True:
        codes = [p.poll() for p in procs]
        bad = sorted(((c >= 0, r, c) for r, c in enumerate(codes) if c not in (None, 0)))
        if bad:
            break
        if all(c == 0 for i, c in enumerate(codes) if i not in servers):
            stop_processes(procs, grace_s)  # the servers, which serve until told to stop
            return 0
        time.sleep(0.1)
    _, rank, code = bad[0]
    if code == watchdog.STALL_EXIT and stall_dir is not None:
        reports = _collect_stall_reports(procs, stall_dir, servers)
        stop_processes(procs, grace_s)
        raise BenchError(f"{watchdog.diagnose(reports, len(procs) - len(servers))}; stopped every rank, "
                         "no result written")
    stop_processes(procs, grace_s)
    if code == ResultNotWhole.exit_code:  # it measured; its own line says what it wrote where
        raise BenchError(f"rank {rank} could not write the whole result (its error above says what was written "
                         "where); stopped the other ranks")
    how = killed_how(-code, oom_before) if code < 0 else f"exited with code {code}"
    advice = "; try a smaller --batch-size" if "out of memory" in how or "out-of-memory" in how else ""
    raise BenchError(f"rank {rank} {how}, first of the ranks; stopped the others, no result written{advice}")


def _collect_stall_reports(procs: list[subprocess.Popen], stall_dir: Path, servers: frozenset[int],
                           wait_s: float = 5.0) -> dict[int, dict]:
    """Every live rank's watchdog fires within about a step of the first: wait up to ``wait_s`` for them."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if all(p.poll() is not None for i, p in enumerate(procs) if i not in servers):
            break
        time.sleep(0.2)
    return watchdog.read_reports(stall_dir)


def stop_processes(procs: list[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM (then SIGCONT, so that a stopped rank takes it at once) to each process group, SIGKILL to those
    still there after ``grace_s``; a second Ctrl-C or SIGTERM meanwhile cannot cut this short (the stop signals
    are ignored until it returns)."""
    old = {s: signal.signal(s, signal.SIG_IGN) for s in STOP_SIGNALS}
    try:
        _terminate(procs, grace_s)
    finally:
        restore_handlers(old)


def _terminate(procs: list[subprocess.Popen], grace_s: float) -> None:
    for p in procs:
        try:  # the whole group, even when its leader is gone: a rank's own children die with it
            os.killpg(p.pid, signal.SIGTERM)
            os.killpg(p.pid, signal.SIGCONT)  # a stopped rank (SIGSTOP, a debugger) takes the SIGTERM now
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
