"""Process supervision: start bench's own ranks, watch them, and stop every one of them however the run ends.

A failed rank stops the others and is named (killed by a signal, the out-of-memory killer, a stall the
watchdog reported); SIGINT, SIGTERM or SIGHUP stop every rank; each rank dies with its spawner.
"""

from __future__ import annotations

import fcntl
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import scratch
from bench.errors import (
    STOP_SIGNALS,
    BenchError,
    NotValid,
    ResultNotWhole,
    Stopped,
    restore_handlers,
    stop_on_signals,
)
from bench.launching import envs
from bench.measure import watchdog

CHILD_CONFIG_ENV = "HVDBENCH_CONFIG"
LAUNCH_TIME_ENV = "HVDBENCH_LAUNCH_TIME"
# Set beside OMP_NUM_THREADS when the spawner chose it (each rank's core share), so that a mode can tell
# the spawner's share from a thread count the user asked for.
THREAD_SHARE_ENV = "HVDBENCH_THREAD_SHARE"
# The spawner's pid: each rank asks the kernel to SIGKILL it when that process dies (see die_with_parent).
PARENT_PID_ENV = "HVDBENCH_PARENT_PID"
# The sweep's pid, set for each cell it runs (see die_with_parent).
SWEEP_PID_ENV = "HVDBENCH_SWEEP_PID"
# Where a rank bench spawned writes Python's traceback if a fatal signal kills it (see report_faults).
FAULT_FILE_ENV = "HVDBENCH_FAULT_FILE"
# A spawner's folder for its ranks' stall reports and fault tracebacks, under the temporary folder.
STALL_DIR_PREFIX = "hvdbench-stall-"
FAULT_SIGNALS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT)
PR_SET_PDEATHSIG = 1


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup"), own: Path = Path("/proc/self/cgroup")) -> float | None:
    """The CPU time this process's cgroup may use, in cores (a container's --cpus, a Kubernetes limit, Slurm's
    cgroup): the smallest quota / period on the way from its cgroup up to the root, cgroup v2's cpu.max or v1's
    cpu.cfs_quota_us and cpu.cfs_period_us; None where no quota is set or none can be read."""
    try:
        lines = own.read_text().splitlines()
    except OSError:
        return None
    paths = {}  # hierarchy -> this process's cgroup path in it ("" for v2's unified one)
    for line in lines:
        _, controllers, path = line.split(":", 2)
        paths["v2" if controllers == "" else controllers] = path
    v1 = next((path for name, path in paths.items() if "cpu" in name.split(",")), None)
    quotas = []
    for base, path, read in ((root, paths.get("v2"), _v2_quota),
                             (root / "cpu", v1, _v1_quota), (root / "cpu,cpuacct", v1, _v1_quota)):
        if path is None or not base.is_dir():
            continue
        folder = base / path.lstrip("/")
        for step in (folder, *folder.parents):
            if step == base.parent:
                break
            quota = read(step)
            if quota is not None:
                quotas.append(quota)
    return min(quotas) if quotas else None


def _v2_quota(folder: Path) -> float | None:
    try:
        quota, period = (folder / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1_quota(folder: Path) -> float | None:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        return None if quota < 0 else quota / int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None


def usable_cores() -> int:
    """The cores this process may keep busy: those it may run on (its CPU affinity: taskset, a cpuset, Slurm's
    --cpus-per-task binding, docker --cpuset-cpus), no more than its cgroup's CPU quota (docker --cpus, Kubernetes'
    limits) rounded down; at least 1. os.cpu_count() is the host's, whatever the process was given."""
    cores = len(os.sched_getaffinity(0))
    quota = cgroup_cpu_quota()
    if quota is not None:
        cores = min(cores, int(quota))
    return max(1, cores)


def cpu_thread_share(local_world_size: int) -> int:
    """Threads per rank when ``local_world_size`` ranks share this node's cores (:func:`usable_cores`).

    N ranks on one node each using every core oversubscribe it and measure contention, not training. The
    spawner gives each rank ``cores // ranks`` threads (OMP_NUM_THREADS, marked with HVDBENCH_THREAD_SHARE),
    as torchrun does; PyTorch ranks use that share. TensorFlow ranks keep TF's own pool unless the user set
    OMP_NUM_THREADS (see bench.distributed.tfdist.set_cpu_threads for why)."""
    return max(1, usable_cores() // max(1, local_world_size))


# Self-spawned runs take their rendezvous ports from here: below Slurm jobs' ranges (bench.launching.slurm,
# from 20000) and below the kernel's ephemeral range, from which it picks the source port of every outgoing
# connection. A port handed to ranks that bind it seconds later (after importing their framework) could
# otherwise be taken in between by any connection the node opens (EADDRINUSE at the rendezvous).
LOCAL_PORTS = (10000, 20000)


def ephemeral_ports(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The kernel's range for the source ports of outgoing connections (Linux's default where unreadable)."""
    try:
        low, high = (int(v) for v in path.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port(rng: random.Random | None = None) -> int:
    """A free TCP port for a rendezvous on this host that no outgoing connection can take before the ranks bind
    it: drawn at random from LOCAL_PORTS (below the ephemeral range; the draw keeps two runs started together
    apart) and tried by binding it; outside the range only if none of 200 draws is free."""
    rng = rng or random.SystemRandom()
    low, high = LOCAL_PORTS[0], min(LOCAL_PORTS[1], ephemeral_ports()[0])
    for _ in range(200 if high > low else 0):
        port = rng.randrange(low, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_argv(argv: list[str]) -> list[str]:
    """The command each spawned rank runs: this same bench invocation."""
    return [*envs.bench_command(), *argv]


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
    (bench.measure.watchdog) names the ranks that did not arrive. SIGINT, SIGTERM or SIGHUP to this process stops every
    rank the same way and raises :class:`Stopped`. Each rank also dies with this process if it is killed
    outright (die_with_parent). ``servers`` (indexes) serve until stopped, such as parameter servers: they are
    stopped once every other process has succeeded. Returns 0 on success.
    """
    command = child_argv(argv)  # first: it may set PYTHONPATH (bench.launching.envs.python_command)
    base = dict(os.environ, HVDBENCH_LAUNCHER="self", PYTHONUNBUFFERED="1", **{CHILD_CONFIG_ENV: config_json},
                **{PARENT_PID_ENV: str(os.getpid())})
    # Like torchrun: each rank gets its share of the cores before any library sizes its thread pools.
    if "OMP_NUM_THREADS" not in base:
        base["OMP_NUM_THREADS"] = base[THREAD_SHARE_ENV] = str(cpu_thread_share(len(rank_envs)))
    procs: list[subprocess.Popen] = []
    old = stop_on_signals()
    scratch.remove_orphaned(scratch.system_tempdir(), STALL_DIR_PREFIX)  # those of spawners killed outright
    with tempfile.TemporaryDirectory(prefix=STALL_DIR_PREFIX, dir=scratch.system_tempdir()) as stall_dir:
        held = os.open(stall_dir, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(held, fcntl.LOCK_EX)  # released by the kernel when this process ends, however it ends
        base[watchdog.STALL_DIR_ENV] = stall_dir
        try:
            oom_before = oom_kills()  # a rank killed by SIGKILL later: was it the out-of-memory killer?
            for i, env in enumerate(rank_envs):
                fault = {FAULT_FILE_ENV: str(Path(stall_dir) / f"fault-{i}.txt")}
                procs.append(subprocess.Popen(command, env=dict(base, **env, **fault),
                                              start_new_session=True))
            return wait_all(procs, grace_s, servers, Path(stall_dir), oom_before)
        except Stopped as exc:
            stop_processes(procs, grace_s)
            raise Stopped(exc.signum, f"all {len(procs)} process(es) stopped, no result written") from None
        finally:
            os.close(held)
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


def report_faults() -> None:
    """In a rank bench spawned: have Python write its traceback into HVDBENCH_FAULT_FILE when a fatal signal
    (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) kills this process, so that the spawner's line can name where it
    died (:func:`crash_site`). The process still dies by the signal."""
    path = os.environ.get(FAULT_FILE_ENV)
    if not path:
        return
    import faulthandler

    try:
        report = open(path, "w")  # noqa: SIM115  (open for the life of the process: the handler writes to it)
    except OSError:
        return
    faulthandler.enable(file=report, all_threads=False)


def crash_site(report: Path) -> str:
    """Where a fatal signal struck, from a rank's faulthandler report (:func:`bench.measure.watchdog.site`), e.g.
    " in triton (.../triton/knobs.py:12, while importing)"; "" where there is no report."""
    try:
        lines = report.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    frames = []  # most recent call first
    for line in lines:
        match = re.match(r'\s*File "([^"<][^"]*)", line (\d+)', line)
        if match:
            frames.append((match.group(1), int(match.group(2))))
    return watchdog.site(frames, any("importlib._bootstrap" in line for line in lines))


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
    bench.measure.watchdog.STALL_EXIT reported a stall: the other ranks get a few seconds to report theirs, then
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
        if stall_dir is not None and any(stall_dir.glob("rank-*.json")):  # a watchdog fired; its rank waits
            bad = [(True, -1, watchdog.STALL_EXIT)]
            break
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
    if code == NotValid.exit_code:  # it measured and wrote the result, which a check of the run failed
        raise NotValid(f"rank {rank} found the run not valid (its error above); its result is written, marked so; "
                       "stopped the other ranks")
    how = killed_how(-code, oom_before) if code < 0 else f"exited with code {code}"
    if code < 0 and -code in FAULT_SIGNALS and stall_dir is not None:
        how += crash_site(stall_dir / f"fault-{rank}.txt")
    advice = "; try a smaller --batch-size" if "out of memory" in how or "out-of-memory" in how else ""
    raise BenchError(f"rank {rank} {how}, first of the ranks; stopped the others, no result written{advice}")


def _collect_stall_reports(procs: list[subprocess.Popen], stall_dir: Path, servers: frozenset[int],
                           wait_s: float = 5.0) -> dict[int, dict]:
    """Every live rank's watchdog fires within about a step of the first (each waits after its report,
    bench.measure.watchdog.REPORT_GRACE_S): wait up to ``wait_s`` for every rank's report or exit."""
    ranks = [p for i, p in enumerate(procs) if i not in servers]
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        reports = watchdog.read_reports(stall_dir)
        if len(reports) >= len(ranks) or all(p.poll() is not None for p in ranks):
            return reports
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
