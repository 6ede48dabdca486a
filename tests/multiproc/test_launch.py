"""Launching for real: self-spawned runs that meet at their rendezvous while the node takes ephemeral ports, and a
stop's SIGTERM then SIGKILL on real processes (the launch commands and the rendezvous checks in process:
tests/unit/test_launch.py)."""

import subprocess
import sys

from tests.conftest import SMALL, bench_env


def test_self_spawned_runs_meet_while_the_node_opens_connections(tmp_path):
    """Two self-spawned runs started together while a thread opens and closes outgoing connections as fast as it
    can (each takes an ephemeral source port): both rendezvous, no EADDRINUSE."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    server.listen(512)
    stop = threading.Event()
    opened = []

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                server.accept()[0].close()
            except OSError:
                pass

    def churn():
        while not stop.is_set():
            with socket.create_connection(server.getsockname()) as c:
                opened.append(c.getsockname()[1])

    threads = [threading.Thread(target=accept, daemon=True), threading.Thread(target=churn, daemon=True)]
    for t in threads:
        t.start()
    try:
        runs = [subprocess.Popen([sys.executable, "-m", "bench", "torch-ddp", "--np", "2", "--device", "cpu", *SMALL,
                                  "--attribution-steps", "0", "--output", str(tmp_path / f"out{i}")],
                                 env=bench_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(2)]
        outputs = [r.communicate(timeout=300) for r in runs]
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=5)
        server.close()
    for r, (_, err) in zip(runs, outputs, strict=True):
        assert r.returncode == 0 and "EADDRINUSE" not in err, err[-2000:]
    assert len(opened) > 100  # the churn really ran beside the runs


def test_ranks_run_this_bench_where_a_bench_folder_is_the_working_folders(tmp_path):
    """Started where a folder named bench/ is (another checkout, an older copy), the ranks still run the bench that
    spawned them: the working folder is not on their sys.path (bench.launching.envs.python_command)."""
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "__init__.py").write_text('raise SystemExit("the bench/ of the working folder ran")\n')
    r = subprocess.run(["bench", "torch-ddp", *SMALL, "--np", "2", "--output", str(tmp_path / "out")], cwd=tmp_path,
                       env=bench_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "working folder ran" not in r.stderr, r.stderr[-2000:]


def test_a_stop_terminates_then_kills_what_outlives_the_grace():
    """stop_processes: SIGTERM to each rank's group, SIGKILL to those still there after the grace. Told apart by
    how each ended (the signal), not by a clock: a rank deaf to SIGTERM dies of SIGKILL, the other of SIGTERM."""
    import signal
    import sys

    from bench.launching import supervise

    deaf_code = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', "
                 "flush=True); time.sleep(600)")
    deaf = subprocess.Popen([sys.executable, "-c", deaf_code], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    polite = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        assert deaf.stdout.readline().strip() == "ready"  # its handler is in place before the stop
        supervise.stop_processes([deaf, polite], grace_s=1.0)
        assert (deaf.returncode, polite.returncode) == (-signal.SIGKILL, -signal.SIGTERM)
    finally:
        for p in (deaf, polite):
            if p.poll() is None:
                p.kill()
                p.wait()
