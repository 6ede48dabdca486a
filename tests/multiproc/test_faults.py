"""Faults: a rank killed mid-run or for memory, a rendezvous nobody else joins."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import SMALL, bench, bench_env
from tests.multiproc import guards
from tests.unit.test_launch import Ended


def children_with_rank(parent: int) -> dict[int, int]:
    """pid of every process whose environment says it is rank N of a self-spawned run under ``parent``."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            items = (proc / "environ").read_bytes().decode().split("\0")
            env = dict(item.split("=", 1) for item in items if "=" in item)
        except (OSError, ValueError):
            continue
        if env.get("HVDBENCH_LAUNCHER") == "self" and "RANK" in env:
            found[int(env["RANK"])] = int(proc.name)
    return found


def test_killed_rank_fails_the_job_fast_and_writes_nothing(out):
    # 100,000 windows: hours of training, so the job ending within the guard is the lost rank's doing
    args = [sys.executable, "-m", "bench", "torch-ddp", *SMALL, "--windows", "100000", "--np", "2",
            "--output", str(out)]
    parent = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=bench_env())
    deadline = time.monotonic() + guards.START_S
    ranks = {}
    while len(ranks) < 2 and time.monotonic() < deadline:
        ranks = children_with_rank(parent.pid)
        time.sleep(0.2)
    assert len(ranks) == 2, "ranks did not start"
    time.sleep(8)  # let them rendezvous and train
    assert parent.poll() is None, parent.communicate()
    os.kill(ranks[1], signal.SIGKILL)
    _, stderr = parent.communicate(timeout=guards.END_S)
    assert parent.returncode != 0
    assert "rank 1 was killed by signal 9" in stderr, stderr
    assert "Traceback" not in stderr
    assert not list(out.glob("*.json"))
    for pid in ranks.values():
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def reserved_port():
    """A port bound but not listening: nothing can answer on it while the socket is open."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s


def test_rendezvous_timeout_is_bounded_and_clear(out):
    with reserved_port() as sock:
        port = str(sock.getsockname()[1])
        # a rank that ignored --rendezvous-timeout 3 would wait the default's 120 s and more: past this guard
        r = bench("torch-ddp", *SMALL, "--rendezvous-timeout", "3", "--output", str(out), timeout=100,
                  TORCHELASTIC_RUN_ID="t", RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=port)
    assert r.returncode == 1
    assert f"rank 0: error: rendezvous at 127.0.0.1:{port} failed or timed out after 3 s" in r.stderr
    assert "Traceback" not in r.stderr


def test_tf_rendezvous_with_a_missing_worker_is_bounded(out):
    with reserved_port() as a, reserved_port() as b:
        workers = [f"127.0.0.1:{s.getsockname()[1]}" for s in (a, b)]
    config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": 0}})
    # the guard (100 s) is under the default timeout (120 s) a rank ignoring --rendezvous-timeout would wait
    r = bench("tf-native", *SMALL, "--rendezvous-timeout", "5", "--output", str(out), timeout=100, TF_CONFIG=config)
    assert r.returncode != 0
    assert (f"rank 0: error: tf.distribute rendezvous of the workers ({', '.join(workers)}) did not complete "
            "within 5 s (--rendezvous-timeout)") in r.stderr
    assert "Traceback" not in r.stderr and not out.joinpath("results.csv").exists()


def test_unresolvable_master_addr_fails_before_any_wait(out):
    # a rendezvous that waited would wait 900 s, past the guard: ending within it is failing before any wait
    r = bench("torch-ddp", *SMALL, "--rendezvous-timeout", "900", "--output", str(out), timeout=guards.END_S,
              TORCHELASTIC_RUN_ID="t", RANK="0", WORLD_SIZE="2", LOCAL_RANK="0",
              MASTER_ADDR="no-such-host.invalid", MASTER_PORT="29500")
    assert r.returncode == 1
    assert ("rank 0: error: rendezvous address from the environment does not resolve: MASTER_ADDR "
            "'no-such-host.invalid'") in r.stderr


# -- out of memory -------------------------------------------------------------------------------------------
def memory_cgroup(limit_bytes: int) -> Path | None:
    """A memory cgroup limited to ``limit_bytes`` (v1 hierarchy, as this kernel mounts it; v2 where unified),
    or None where none can be made (not root, no writable cgroup file system)."""
    name = f"hvdbench-oom-{os.getpid()}"
    for root, limit_file in ((Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
                             (Path("/sys/fs/cgroup"), "memory.max")):
        group = root / name
        try:
            group.mkdir()
            (group / limit_file).write_text(str(limit_bytes))
            return group
        except OSError:
            if group.exists():
                group.rmdir()
    return None


def test_a_rank_killed_for_memory_is_named_with_the_cause(tmp_path):
    """Two ranks in a 1.5 GiB cgroup, each asked for a ResNet-50 batch of 64 at 224x224 (several GiB of
    activations): the kernel's out-of-memory killer ends one; the spawner names it, the signal and the cause,
    stops the other, and writes nothing."""
    group = memory_cgroup(3 * 2**29)
    if group is None:
        pytest.skip("no memory cgroup can be made here (needs root and a writable cgroup file system)")
    out = tmp_path / "out"
    script = f'echo $$ > {group}/cgroup.procs && exec "$@"'
    try:
        r = subprocess.run(["sh", "-c", script, "sh", sys.executable, "-m", "bench", "torch-ddp", "--model",
                            "resnet50", "--image-size", "224", "--batch-size", "64", "--warmup-steps", "0",
                            "--steps-per-window", "1", "--windows", "1", "--np", "2", "--output", str(out)],
                           capture_output=True, text=True, timeout=300, env=bench_env())
        left = (group / "cgroup.procs").read_text().split()
    finally:
        for _ in range(50):  # the stopped rank may take a moment to leave the group
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.2)
    assert r.returncode == 1, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    assert re.search(r"^error: rank \d was killed by signal 9 \(SIGKILL\): the kernel's out-of-memory killer ended it",
                     line) and "try a smaller --batch-size" in line, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and left == []  # nothing left running in the group
    assert not out.exists() or not list(out.glob("*.json"))


def test_a_rank_that_dies_of_a_fatal_signal_is_named_with_where_it_died(tmp_path, monkeypatch):
    """A rank killed by SIGSEGV while loading a library (as PyPI's Triton did beside TensorFlow) leaves Python's
    traceback in its fault file (supervise.report_faults); the spawner's one line names the signal and the package
    it died in, and no result."""
    from bench.errors import BenchError
    from bench.launching import supervise

    package = tmp_path / "site-packages" / "crashlib"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import ctypes\n\nctypes.string_at(0)\n")  # a read at address 0
    fault = tmp_path / "fault-1.txt"
    child = subprocess.run(
        [sys.executable, "-c", "from bench.launching import supervise; supervise.report_faults(); import crashlib"],
        env=dict(bench_env(), HVDBENCH_FAULT_FILE=str(fault), PYTHONPATH=os.pathsep.join(
            [str(tmp_path / "site-packages"), bench_env().get("PYTHONPATH", "")])),
        capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGSEGV, child.stderr[-2000:]
    assert supervise.crash_site(fault) == " in crashlib (.../site-packages/crashlib/__init__.py:3, while importing)"
    monkeypatch.setattr(supervise, "stop_processes", lambda procs, grace_s: None)
    with pytest.raises(BenchError) as got:
        supervise.wait_all([Ended(None), Ended(-signal.SIGSEGV)], stall_dir=tmp_path)
    assert str(got.value) == ("rank 1 was killed by signal 11 (SIGSEGV) in crashlib (.../site-packages/crashlib/"
                              "__init__.py:3, while importing), first of the ranks; stopped the others, no result "
                              "written")
    assert supervise.crash_site(tmp_path / "no-such-report.txt") == ""
