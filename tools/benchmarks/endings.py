"""How fast a stopped job leaves nothing behind: time from a signal (self-spawned) or from scancel (srun)
until no process of the job is left, per mode. Prints a table.

    python -m tools.benchmarks.endings                       # SIGTERM to the self-spawner, every mode
    python -m tools.benchmarks.endings --signal INT --modes torch-ddp,tf-horovod
    python -m tools.benchmarks.endings --slurm               # scancel of an srun job (tools/slurm-up.sh)
    python -m tools.benchmarks.endings --launchers    # SIGTERM to mpirun, horovodrun, torchrun as outer launchers

A job's processes are found through their environment, which every descendant inherits: the self-spawned
ranks carry HVDBENCH_PARENT_PID=<the spawner>, the tasks of a Slurm job SLURM_JOB_ID=<the job>, and under
an outer launcher every process carries a tag this script sets (HVDBENCH_ENDINGS_TAG). The clock
starts when the signal is sent (scancel returns) and stops when the last such process, and the spawner or
srun itself, is gone. The signal is sent once rank 0 has logged its first timed window (training is under way,
every collective in use).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# A tiny but real run that never ends by itself (the signal ends it).
SMALL = ["--model", "resnet50", "--image-size", "32", "--batch-size", "2", "--num-classes", "10",
         "--warmup-steps", "1", "--steps-per-window", "2", "--windows", "100000"]
# TensorFlow's modes on the smallest model: how a job ends does not depend on it, and its graph traces about
# 10 s faster per rank than ResNet-50's.
TF_SMALL = ["--model", "transformer-small", "--batch-size", "2", "--seq-len", "8", *SMALL[8:]]
# (label, bench arguments, srun's --mpi): every mode and tf-native strategy.
MODES = {
    "torch-ddp": (["torch-ddp", *SMALL], []),
    "torch-horovod": (["torch-horovod", *SMALL], ["--mpi=pmix"]),
    "tf-horovod": (["tf-horovod", *TF_SMALL], ["--mpi=pmix"]),
    "tf-native": (["tf-native", *TF_SMALL], []),
    "tf-native:mirrored": (["tf-native", *TF_SMALL, "--strategy", "mirrored"], None),
    "tf-native:ps": (["tf-native", *TF_SMALL, "--strategy", "ps"], None),
    "torch-single": (["torch-single", *SMALL], None),
    "tf-single": (["tf-single", *TF_SMALL], None),
}


def environ(pid: int) -> dict[str, str]:
    try:
        items = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return {}
    return dict(i.decode(errors="replace").split("=", 1) for i in items if b"=" in i)


def alive(pid: int) -> bool:
    """Not gone and not a zombie (a zombie holds nothing: no GPU, no port, no CPU)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def processes_with(name: str, value: str) -> list[int]:
    """Live processes whose environment has name=value."""
    own = os.getpid()
    return [int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and int(p.name) != own and environ(int(p.name)).get(name) == value
            and alive(int(p.name))]


def wait_for_line(path: Path, needle: str, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"ended before '{needle}': {path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)
    raise RuntimeError(f"no '{needle}' within {timeout} s: {path.read_text(errors='replace')[-2000:]}")


def wait_gone(pids_of, proc: subprocess.Popen, timeout: float) -> list[int]:
    """Poll until ``proc`` has exited and ``pids_of()`` is empty; returns what is left at the timeout."""
    deadline = time.monotonic() + timeout
    left = pids_of()
    while time.monotonic() < deadline:
        left = pids_of()
        if proc.poll() is not None and not left:
            return []
        time.sleep(0.05)
    return left


def bench_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDBENCH_", "SLURM_", "OMPI_", "HOROVOD_"))}
    env.update(PYTHONUNBUFFERED="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def end_job(cmd: list[str], env: dict[str, str], out: Path, job_pids, stop, timeout: float = 300,
            gone_within: float = 60) -> dict:
    """Start ``cmd``; once rank 0 logged its first window, ``stop(proc)`` and time until ``job_pids(proc)``
    is empty and ``proc`` has exited. What was left, the exit code, stderr and result files come back too."""
    log = out / "stderr.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([*cmd, "--output", str(out / "results")], stdout=f, stderr=f, env=env, cwd=ROOT)
    try:
        wait_for_line(log, "window 1", timeout, proc)
        ranks = [p for p in job_pids(proc) if p != proc.pid]
        sent = time.monotonic()
        stop(proc)
        left = wait_gone(lambda: job_pids(proc), proc, gone_within)
        seconds = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return {"ranks": len(ranks), "seconds": seconds, "left": left, "returncode": proc.returncode,
            "stderr": log.read_text(errors="replace"), "results": sorted((out / "results").glob("*.json"))}


def signal_self_spawned(args: list[str], signum: int, out: Path) -> dict:
    """Run ``bench ARGS --np 2`` (self-spawned), send ``signum`` to the spawner once training is under way."""
    np = [] if args[0].endswith("-single") or "mirrored" in args else ["--np", "2"]
    return end_job([sys.executable, "-m", "bench", *args, *np], bench_env(), out,
                   lambda proc: processes_with("HVDBENCH_PARENT_PID", str(proc.pid)),
                   lambda proc: proc.send_signal(signum))


def scancel_srun(args: list[str], mpi: list[str], out: Path, env: dict[str, str],
                 bench: list[str] | None = None) -> dict:
    """``srun -n2 bench ARGS`` as one Slurm job; scancel it once training is under way. ``bench`` is how
    each task starts bench (default this Python's; e.g. ``apptainer exec SIF bench``)."""
    name = f"hvdbench-endings-{os.getpid()}-{time.monotonic_ns()}"
    job = {}

    def job_id() -> str:
        if "id" not in job:
            job["id"] = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True,
                                       env=env).stdout.strip()
        return job["id"]

    bench = bench or [sys.executable, "-m", "bench"]
    return end_job(["srun", "-J", name, *mpi, "-n2", *bench, *args], env, out,
                   lambda proc: processes_with("SLURM_JOB_ID", job_id()),
                   lambda proc: subprocess.run(["scancel", job_id()], check=True, env=env), gone_within=120)


# Outer launchers: (label, launcher command before bench's own arguments, bench arguments).
LAUNCHERS = {
    "mpirun torch-horovod": (["mpirun", "-np", "2", "--oversubscribe", sys.executable, "-m", "bench"],
                             ["torch-horovod", *SMALL]),
    "horovodrun torch-horovod": (["horovodrun", "--gloo", "-np", "2", sys.executable, "-m", "bench"],
                                 ["torch-horovod", *SMALL]),
    "torchrun torch-ddp": ([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "bench"],
                           ["torch-ddp", *SMALL]),
}


def signal_launcher(launcher: list[str], args: list[str], signum: int, out: Path) -> dict:
    """Run bench under an outer launcher; send ``signum`` to the launcher once training is under way."""
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    env = dict(bench_env(), HVDBENCH_ENDINGS_TAG=tag, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return end_job([*launcher, *args], env, out, lambda proc: processes_with("HVDBENCH_ENDINGS_TAG", tag),
                   lambda proc: proc.send_signal(signum))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--signal", default="TERM", choices=["TERM", "INT", "HUP"])
    parser.add_argument("--slurm", action="store_true", help="scancel an srun job instead (needs slurm-up)")
    parser.add_argument("--launchers", action="store_true", help="signal mpirun, horovodrun, torchrun instead")
    a = parser.parse_args()
    from rich.console import Console
    from rich.table import Table

    env = bench_env()
    if a.slurm:
        conf = subprocess.run([str(ROOT / "tools" / "slurm-up.sh")], capture_output=True, text=True, check=True)
        env["SLURM_CONF"] = conf.stdout.strip().splitlines()[-1]
    how = "scancel (srun -n2)" if a.slurm else f"SIG{a.signal} to the " + ("launcher" if a.launchers else
                                                                          "self-spawner")
    table = Table("mode", "processes", "seconds to none left", "left", "exit code", "results", "last line",
                  title=f"{how}: time until no process of the job is left")
    labels = list(LAUNCHERS) if a.launchers else a.modes.split(",")
    for label in labels:
        args, mpi = LAUNCHERS[label] if a.launchers else MODES[label]
        if a.slurm and mpi is None:
            continue  # single-process modes and tf-native's own spawner layouts are not srun jobs
        with tempfile.TemporaryDirectory() as tmp:
            if a.launchers:
                r = signal_launcher(args, mpi, getattr(signal, f"SIG{a.signal}"), Path(tmp))
            elif a.slurm:
                r = scancel_srun(args, mpi, Path(tmp), env)
            else:
                r = signal_self_spawned(args, getattr(signal, f"SIG{a.signal}"), Path(tmp))
        last = [line for line in r["stderr"].splitlines() if line.strip()][-1:] or [""]
        table.add_row(label, str(r["ranks"]), f"{r['seconds']:.2f}", str(len(r["left"])), str(r["returncode"]),
                      str(len(r["results"])), last[0][:70])
        Console().print(f"{label}: {r['seconds']:.2f} s, {len(r['left'])} left", highlight=False)
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
