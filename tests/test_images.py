"""The CPU image, for real: `make image-test` starts an engine and builds it first (docker/images.py).

Containers run through the Docker SDK; the two-node run through docker-compose and compose.yaml.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SMALL, assert_valid_run, only_result

pytestmark = [pytest.mark.image, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docker"))
import images  # noqa: E402

IMAGE = os.environ.get("HVDBENCH_TEST_IMAGE", "hvdbench:current-cpu")
CA = os.environ.get("HVDBENCH_CA_BUNDLE", images.DEFAULT_CA)


@pytest.fixture(scope="module")
def dk():
    import docker

    client = images.client()
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{IMAGE} is not built: run 'make image-test'")
    return client


def run(dk, args, results: Path | None = None, user: str | None = None, timeout: int = 600):
    volumes = {str(results): {"bind": "/work/results", "mode": "rw"}} if results else {}
    container = dk.containers.run(IMAGE, args, volumes=volumes, user=user, detach=True, shm_size="1g")
    try:
        code = container.wait(timeout=timeout)["StatusCode"]
        return code, container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)


def test_help_and_version(dk):
    code, logs = run(dk, ["--help"])
    assert code == 0 and "torch-ddp" in logs and "tf-native" in logs
    code, logs = run(dk, ["--version"])
    assert code == 0 and "hvdbench" in logs


def test_labels_name_the_versions(dk):
    labels = dk.images.get(IMAGE).labels
    stack = images.read_stack("current")
    assert labels["io.hvdbench.stack"] == "current" and labels["io.hvdbench.flavor"] == "cpu"
    assert labels["io.hvdbench.torch"] == stack["TORCH_VERSION"]
    assert labels["io.hvdbench.horovod"] == stack["HOROVOD_VERSION"]
    assert labels["org.opencontainers.image.version"]


def test_torch_ddp_in_container(dk, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    code, logs = run(dk, ["torch-ddp", *SMALL, "--np", "2", "--output", "/work/results"], results)
    assert code == 0, logs
    result = only_result(results)
    assert_valid_run(result, "torch-ddp", 2, "self")
    assert result["environment"]["container"] == "docker"
    assert result["telemetry"]["available"] is False


def test_tf_horovod_as_non_root_user(dk, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    os.chown(results, 1234, 1234)
    code, logs = run(dk, ["tf-horovod", *SMALL, "--np", "2", "--output", "/work/results"], results, user="1234:1234")
    assert code == 0, logs
    result = only_result(results)
    assert_valid_run(result, "tf-horovod", 2, "self")
    assert all(p.stat().st_uid == 1234 for p in results.iterdir())


def test_no_secret_in_any_layer(dk):
    if not Path(CA).is_file():
        pytest.skip(f"no CA bundle at {CA}")
    assert images.check_secrets(IMAGE, CA) == []


def test_secret_scan_finds_a_baked_secret(dk, tmp_path):
    """The check must be able to fail: an image that copies a certificate into a layer is caught."""
    import docker

    pem = (b"-----BEGIN CERTIFICATE-----\n" + b"TUlJQmhvdmRiZW5jaHRlc3RjZXJ0aWZpY2F0ZQ==" * 3 +
           b"\n-----END CERTIFICATE-----\n")
    (tmp_path / "leak.pem").write_bytes(pem)
    (tmp_path / "Dockerfile").write_text(f"FROM {images.LOCAL_BASE}\nCOPY leak.pem /etc/leak.pem\n")
    tag = "hvdbench-test:leak"
    dk.images.build(path=str(tmp_path), tag=tag, rm=True)
    try:
        hits = images.secret_hits(tag, pem)
        assert any(h.endswith("etc/leak.pem") for h in hits), hits
    finally:
        try:
            dk.images.remove(tag, force=True)
        except docker.errors.APIError:
            pass


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose is not installed")
def test_compose_two_nodes_over_tcp(dk, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    env = dict(os.environ, HVDBENCH_IMAGE=IMAGE, HVDBENCH_RESULTS=str(results),
               COMPOSE_PROJECT_NAME=f"hvdbench-test-{os.getpid()}")
    cmd = ["docker-compose", "-f", str(ROOT / "compose.yaml"), "--profile", "two-node"]
    try:
        r = subprocess.run([*cmd, "up", "--abort-on-container-exit", "--exit-code-from", "node0"], env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    finally:
        subprocess.run([*cmd, "down", "--remove-orphans"], env=env, capture_output=True)
    result = only_result(results)
    assert result["launcher"] == "tf-config" and result["world_size"] == 2
    assert {r["host"] for r in result["environment"]["ranks"]} == {"node0", "node1"}
    assert result["sync"]["ranks_in_sync"] and result["sync"]["params_changed"]
    print(json.dumps(result["summary"]["images_per_sec_total"]))
