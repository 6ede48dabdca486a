"""Faults: a rank killed mid-run, a rendezvous nobody else joins."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SMALL, bench, bench_env

pytestmark = pytest.mark.multiproc


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
    args = [sys.executable, "-m", "bench", "torch-ddp", *SMALL, "--windows", "1000", "--np", "2",
            "--output", str(out)]
    parent = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=bench_env())
    deadline = time.monotonic() + 60
    ranks = {}
    while len(ranks) < 2 and time.monotonic() < deadline:
        ranks = children_with_rank(parent.pid)
        time.sleep(0.2)
    assert len(ranks) == 2, "ranks did not start"
    time.sleep(8)  # let them rendezvous and train
    assert parent.poll() is None, parent.communicate()
    killed_at = time.monotonic()
    os.kill(ranks[1], signal.SIGKILL)
    _, stderr = parent.communicate(timeout=60)
    assert time.monotonic() - killed_at < 60
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
        start = time.monotonic()
        r = bench("torch-ddp", *SMALL, "--rendezvous-timeout", "3", "--output", str(out), timeout=60,
                  TORCHELASTIC_RUN_ID="t", RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=port)
    assert r.returncode == 1
    assert time.monotonic() - start < 30
    assert f"rank 0: error: rendezvous at 127.0.0.1:{port} failed or timed out after 3 s" in r.stderr
    assert "Traceback" not in r.stderr


def test_tf_rendezvous_with_a_missing_worker_is_bounded(out):
    with reserved_port() as a, reserved_port() as b:
        workers = [f"127.0.0.1:{s.getsockname()[1]}" for s in (a, b)]
    config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": 0}})
    start = time.monotonic()
    r = bench("tf-native", *SMALL, "--rendezvous-timeout", "5", "--output", str(out), timeout=120, TF_CONFIG=config)
    assert r.returncode != 0 and time.monotonic() - start < 60
    assert (f"rank 0: error: tf.distribute rendezvous of the workers ({', '.join(workers)}) did not complete "
            "within 5 s (--rendezvous-timeout)") in r.stderr
    assert "Traceback" not in r.stderr and not out.joinpath("results.csv").exists()


def test_unresolvable_master_addr_fails_before_any_wait(out):
    start = time.monotonic()
    r = bench("torch-ddp", *SMALL, "--output", str(out), timeout=60, TORCHELASTIC_RUN_ID="t", RANK="0",
              WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="no-such-host.invalid", MASTER_PORT="29500")
    assert r.returncode == 1 and time.monotonic() - start < 20
    assert ("rank 0: error: rendezvous address from the environment does not resolve: MASTER_ADDR "
            "'no-such-host.invalid'") in r.stderr
