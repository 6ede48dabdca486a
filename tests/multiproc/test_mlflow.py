"""--mlflow and bench history export mlflow against a real MLflow tracking server (`mlflow server` on 127.0.0.1, a
SQLite backend and an artifact folder of its own), read back through MLflow's own client: the run's params,
metrics (the windows' series too), tags and artifacts; an export logs each run once; a server that is down costs a
run one warning line, never its result."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.conftest import bench
from tests.multiproc.test_history import records
from tools.postgres import free_port

pytestmark = pytest.mark.multiproc
mlflow = pytest.importorskip("mlflow", reason="mlflow is not installed (the dev venv has it: pip install mlflow)")

TINY = ["--model", "resnet20", "--image-size", "32", "--batch-size", "2", "--num-classes", "10", "--warmup-steps",
        "1", "--steps-per-window", "2", "--windows", "3", "--device", "cpu", "--no-telemetry"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A tracking server of its own, in its own process group (its workers go with it); its URI."""
    folder = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    log = open(folder / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
                             "--artifacts-destination", str(folder / "artifacts"), "--workers", "1"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # a deadlock guard: it answers within seconds here
        while True:
            assert proc.poll() is None, (folder / "server.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, (folder / "server.log").read_text()[-3000:]
            time.sleep(0.5)
        yield uri
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_a_run_is_logged_as_mlflow_shows_it(server, tmp_path):
    out = tmp_path / "results"
    r = bench("torch-single", *TINY, "--output", str(out), "--mlflow", server, "--mlflow-experiment", "nightly")
    assert r.returncode == 0, r.stderr
    assert "mlflow: logged as run" in r.stdout, r.stdout[-2000:]
    path = next(out.glob("*.json"))
    record = json.loads(path.read_text())

    client = mlflow.MlflowClient(tracking_uri=server)
    experiment = client.get_experiment_by_name("nightly")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == record["run_id"] and run.info.status == "FINISHED"
    assert run.data.params["config.model"] == "resnet20" and run.data.params["world_size"] == "1"
    assert run.data.metrics["samples_per_sec_total"] == pytest.approx(record["summary"]["samples_per_sec_total"])
    windows = client.get_metric_history(run.info.run_id, "window_samples_per_sec")
    assert [m.step for m in sorted(windows, key=lambda m: m.step)] == [0, 1, 2]
    assert [m.value for m in sorted(windows, key=lambda m: m.step)] == pytest.approx(
        record["summary"]["windows_total_samples_per_sec"])
    assert run.data.tags["hvdbench.mode"] == "torch-single" and run.data.tags["hvdbench.node"]
    assert run.data.tags["hvdbench.torch"] == record["environment"]["torch"]["version"]
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == [path.name]


def test_an_export_logs_each_run_once(server, tmp_path):
    folder = records(tmp_path / "results")
    (folder / "sweep-b" / "cut.json").unlink()
    db = f"sqlite:///{tmp_path / 'h.db'}"
    assert bench("history", "add", str(folder), "--db", db).returncode == 0
    runs = len([p for p in folder.rglob("*.json") if p.name != "manifest.json"])
    first = bench("history", "export", "mlflow", server, "--db", db, "--experiment", "imported")
    assert first.returncode == 0, first.stderr
    assert f"history: {runs} run(s) logged to MLflow, 0 already there, 0 file(s) gone" in first.stdout
    again = bench("history", "export", "mlflow", server, "--db", db, "--experiment", "imported")
    assert f"history: 0 run(s) logged to MLflow, {runs} already there" in again.stdout, again.stderr
    client = mlflow.MlflowClient(tracking_uri=server)
    experiment = client.get_experiment_by_name("imported")
    assert len(client.search_runs([experiment.experiment_id], max_results=1000)) == runs


def test_a_server_that_is_down_costs_one_warning_line_not_the_result(tmp_path):
    out = tmp_path / "results"
    r = bench("torch-single", *TINY, "--output", str(out), "--mlflow", f"http://127.0.0.1:{free_port()}")
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "MLflow" in line]
    assert len(said) == 1 and said[0].startswith("warning: not logged to MLflow (the result is written):"), r.stderr
    (path,) = out.glob("*.json")
    assert json.loads(path.read_text())["status"] == "ok"
