"""The host's settings that make a GPU node measure less than it can, or fail under load, for ``bench preflight``
(the host prescreen operators run before they accept a node): the CPU frequency governor, the idle states (C-states)
offered and enabled, automatic NUMA balancing, the IOMMU's mode, transparent huge pages, swap, the open-files and
locked-memory limits NCCL and MPI need, under Slurm whether srun offers PMIx, and the container runtime's GPU hooks
(inside a container: whether its runtime gave it the GPUs and the driver's libraries; on a host with GPUs: whether
each container runtime there has the hook that does).

Each is read from sysfs and procfs (roots :data:`bench.measure.env_faults.SYSFS` and :data:`PROCFS`, moved by
``HVDBENCH_SYSFS`` and ``HVDBENCH_PROCFS`` for tests) and is a finding with what to do. The severities follow
bench preflight's: ``error`` where a run would fail (a locked-memory limit on a node with InfiniBand: RDMA registers
memory), ``warning`` where it would measure less than the hardware does (a governor other than performance, deep
idle states, NUMA balancing, an IOMMU that translates DMA, swap, a low open-files limit, no PMIx for srun's MPI
jobs), ``ok`` with what was seen, ``n/a`` where the host does not have the setting (a VM without cpufreq).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from bench.measure import env_faults
from bench.measure.env_faults import Finding

PROCFS = Path(os.environ.get("HVDBENCH_PROCFS", "/proc"))
CHECK = "host"
# An idle state whose exit latency passes this is deep: a core waking from it takes about as long as an allreduce
# of a small message, and the launch of every kernel that follows waits for it.
DEEP_IDLE_US = 100
# Below this many open files a node's ranks run out: each opens sockets per peer and channel (NCCL's socket
# transport, Gloo), the loaders their files, and MPI its own.
NOFILE_MIN = 65536


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def governor(sysfs: Path) -> Finding:
    found = Counter(v for p in sorted(sysfs.glob("devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"))
                    if (v := _read(p)))
    if not found:
        return Finding(CHECK, "cpu governor", "n/a", "no cpufreq here (a VM, or the firmware holds the clocks)")
    seen = ", ".join(f"{g} on {n} CPU(s)" for g, n in found.most_common())
    if set(found) == {"performance"}:
        return Finding(CHECK, "cpu governor", "ok", seen)
    return Finding(CHECK, "cpu governor", "warning", f"{seen}: the clocks ramp up after each idle, so the host's part "
                   "of every step (the launches, the loaders) runs slower; cpupower frequency-set -g performance")


def idle_states(sysfs: Path) -> Finding:
    states = []
    for path in sorted(sysfs.glob("devices/system/cpu/cpu0/cpuidle/state[0-9]*")):
        name, latency, disabled = _read(path / "name"), _read(path / "latency"), _read(path / "disable")
        if name is not None and latency is not None and latency.isdigit():
            states.append((name, int(latency), disabled == "1"))
    if not states:
        return Finding(CHECK, "c-states", "n/a", "no cpuidle states here")
    offered = ", ".join(f"{n} ({lat} us{', disabled' if off else ''})" for n, lat, off in states)
    deep = [n for n, lat, off in states if not off and lat > DEEP_IDLE_US]
    if deep:
        return Finding(CHECK, "c-states", "warning", f"offered on cpu0: {offered}; enabled and deeper than "
                       f"{DEEP_IDLE_US} us: {', '.join(deep)}: a waking core delays the kernels it launches; limit "
                       "them (the firmware's C-state setting, or cpupower idle-set -D 100)")
    return Finding(CHECK, "c-states", "ok", f"offered on cpu0: {offered}; none enabled deeper than {DEEP_IDLE_US} us")


def numa_balancing(procfs: Path) -> Finding:
    value = _read(procfs / "sys/kernel/numa_balancing")
    if value is None:
        return Finding(CHECK, "numa balancing", "n/a", "this kernel has no automatic NUMA balancing")
    if value == "0":
        return Finding(CHECK, "numa balancing", "ok", "off (kernel.numa_balancing = 0)")
    return Finding(CHECK, "numa balancing", "warning", f"on (kernel.numa_balancing = {value}): the kernel moves "
                   "pages between NUMA nodes while the ranks run, stalling them; sysctl -w kernel.numa_balancing=0")


def iommu(sysfs: Path, procfs: Path) -> Finding:
    units = sorted(p.name for p in (sysfs / "class/iommu").glob("*")) if (sysfs / "class/iommu").is_dir() else []
    words = (_read(procfs / "cmdline") or "").split()
    passthrough = "iommu=pt" in words or "iommu.passthrough=1" in words
    if not units:
        return Finding(CHECK, "iommu", "ok", "no IOMMU translates DMA here")
    if passthrough:
        return Finding(CHECK, "iommu", "ok", f"{len(units)} IOMMU unit(s) in passthrough (iommu=pt)")
    return Finding(CHECK, "iommu", "warning", f"{len(units)} IOMMU unit(s) translating DMA, not in passthrough: GPU "
                   "peer-to-peer and GPUDirect RDMA go through it, slower, or are turned off; add iommu=pt to the "
                   "kernel command line")


def huge_pages(sysfs: Path) -> Finding:
    text = _read(sysfs / "kernel/mm/transparent_hugepage/enabled")
    if text is None:
        return Finding(CHECK, "huge pages", "n/a", "no transparent huge pages in this kernel")
    chosen = next((w.strip("[]") for w in text.split() if w.startswith("[")), text)
    return Finding(CHECK, "huge pages", "ok", f"transparent huge pages: {chosen}")


def swap(procfs: Path) -> Finding:
    text = _read(procfs / "swaps")
    if text is None:
        return Finding(CHECK, "swap", "n/a", "no /proc/swaps")
    devices = [line.split() for line in text.splitlines()[1:] if line.strip()]
    if not devices:
        return Finding(CHECK, "swap", "ok", "no swap")
    kib = sum(int(d[2]) for d in devices if len(d) > 2 and d[2].isdigit())
    return Finding(CHECK, "swap", "warning", f"{len(devices)} swap device(s), {kib // 1024} MiB: a rank whose pages "
                   "are swapped out stalls every rank of a synchronous job; swapoff -a on compute nodes")


def limits(sysfs: Path, getrlimit: Callable[[int], tuple[int, int]] = resource.getrlimit) -> list[Finding]:
    soft, _ = getrlimit(resource.RLIMIT_NOFILE)
    out = [Finding(CHECK, "open files", "ok" if soft == resource.RLIM_INFINITY or soft >= NOFILE_MIN else "warning",
                   f"ulimit -n {soft}" + ("" if soft == resource.RLIM_INFINITY or soft >= NOFILE_MIN else
                                          f": below {NOFILE_MIN}, a node's ranks can run out of sockets and files; "
                                          "raise nofile in limits.conf (and Slurm's PropagateResourceLimits)"))]
    locked, _ = getrlimit(resource.RLIMIT_MEMLOCK)
    infiniband = (sysfs / "class/infiniband").is_dir() and any((sysfs / "class/infiniband").iterdir())
    shown = "unlimited" if locked == resource.RLIM_INFINITY else f"{locked // 1024} KiB"
    if locked == resource.RLIM_INFINITY:
        out.append(Finding(CHECK, "locked memory", "ok", "ulimit -l unlimited"))
    elif infiniband:
        out.append(Finding(CHECK, "locked memory", "error", f"ulimit -l {shown} on a node with InfiniBand: RDMA "
                           "registers (locks) its buffers, so NCCL's IB transport and MPI over verbs fail or fall back "
                           "to sockets; memlock unlimited in limits.conf (and Slurm's PropagateResourceLimits)"))
    else:
        out.append(Finding(CHECK, "locked memory", "ok", f"ulimit -l {shown}; no InfiniBand here, which alone needs it "
                           "unlimited"))
    return out


def srun_mpi(environ: dict[str, str]) -> list[Finding]:
    """Under Slurm: whether srun offers PMIx, which tf-horovod and torch-horovod under srun start with."""
    if "SLURM_JOB_ID" not in environ or shutil.which("srun") is None:
        return []
    try:
        done = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return [Finding(CHECK, "srun --mpi", "n/a", "srun --mpi=list gave no answer in 30 s")]
    text = (done.stdout + done.stderr).lower()
    if "pmix" in text:
        return [Finding(CHECK, "srun --mpi", "ok", "srun offers pmix")]
    return [Finding(CHECK, "srun --mpi", "warning", "srun --mpi=list offers no pmix: the Horovod modes under srun "
                    "start with --mpi=pmix; build Slurm with PMIx, or start them with mpirun")]


def _loads(name: str) -> bool:
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


HOOKS = "docker --gpus (the NVIDIA Container Toolkit's hook), apptainer/singularity --nv, enroot's 98-nvidia hook"


def gpu_runtime(inside: str | None, dev: Path = Path("/dev"), procfs: Path | None = None,
                etc: Path = Path("/etc"), run: Path = Path("/var/run"),
                which: Callable[[str], str | None] = shutil.which,
                loads: Callable[[str], bool] = _loads) -> list[Finding]:
    """The container runtime's GPU hook. Inside a container (``inside``: bench.records.env.container's kind): its GPU
    devices and the driver's NVML library, which the hook mounts in; on the host, for each runtime on PATH where the
    host has GPUs: Docker's NVIDIA runtime or CDI spec, enroot's NVIDIA hook (apptainer's --nv binds the driver's
    libraries itself)."""
    procfs = PROCFS if procfs is None else procfs
    gpus = sorted(p.name for p in dev.glob("nvidia[0-9]*"))
    driver = (procfs / "driver" / "nvidia" / "version").exists()
    member = "gpu runtime"
    if inside:
        if gpus and loads("libnvidia-ml.so.1"):
            return [Finding(CHECK, member, "ok", f"in {inside}: {len(gpus)} GPU device(s) and the driver's "
                            "libnvidia-ml.so.1, mounted by the runtime's hook")]
        if gpus:
            return [Finding(CHECK, member, "error", f"in {inside}: {len(gpus)} GPU device(s) but not the driver's "
                            f"libnvidia-ml.so.1: the runtime's GPU hook did not run; start it with {HOOKS}")]
        if driver:
            return [Finding(CHECK, member, "warning", f"in {inside}: the host's NVIDIA driver is seen but no GPU "
                            f"device was given to the container; start it with {HOOKS}")]
        return [Finding(CHECK, member, "n/a", f"in {inside}: no NVIDIA GPU device or driver here")]
    if not gpus:
        return [Finding(CHECK, member, "n/a", "no NVIDIA GPU device on this host")]
    out = []
    if which("docker"):
        try:
            runtimes = json.loads((etc / "docker" / "daemon.json").read_text()).get("runtimes") or {}
        except (OSError, ValueError, AttributeError):
            runtimes = {}
        cdi = [p.name for d in (etc / "cdi", run / "cdi") for p in sorted(d.glob("nvidia*"))]
        if "nvidia" in runtimes or cdi or which("nvidia-container-runtime-hook"):
            how = "its nvidia runtime" if "nvidia" in runtimes else f"CDI ({', '.join(cdi)})" if cdi else \
                "nvidia-container-runtime-hook"
            out.append(Finding(CHECK, "docker", "ok", f"docker's GPU hook: {how}"))
        else:
            out.append(Finding(CHECK, "docker", "warning", "docker is here but the NVIDIA Container Toolkit is not "
                               "(no nvidia runtime in /etc/docker/daemon.json, no CDI spec, no hook): docker run "
                               "--gpus fails; install nvidia-container-toolkit, then nvidia-ctk runtime configure"))
    if which("enroot"):
        hook = etc / "enroot" / "hooks.d" / "98-nvidia.sh"
        out.append(Finding(CHECK, "enroot", "ok", f"enroot's NVIDIA hook: {hook}") if hook.exists() else
                   Finding(CHECK, "enroot", "warning", f"enroot is here without its NVIDIA hook ({hook}): its "
                           "containers (pyxis's srun --container-image) get no GPU; install enroot's hooks"))
    return out or [Finding(CHECK, member, "n/a", "no docker or enroot on PATH (apptainer's --nv needs no hook)")]


def findings(sysfs: Path | None = None, procfs: Path | None = None, environ: dict[str, str] | None = None,
             getrlimit: Callable[[int], tuple[int, int]] = resource.getrlimit,
             inside: str | None = None) -> list[Finding]:
    """Every check; ``inside``: the container this runs in (bench.records.env.container), None on a host."""
    sysfs = env_faults.SYSFS if sysfs is None else sysfs
    procfs = PROCFS if procfs is None else procfs
    environ = dict(os.environ) if environ is None else environ
    return [governor(sysfs), idle_states(sysfs), numa_balancing(procfs), iommu(sysfs, procfs), huge_pages(sysfs),
            swap(procfs), *limits(sysfs, getrlimit), *srun_mpi(environ), *gpu_runtime(inside, procfs=procfs)]
