"""The CPU image, for real: `make test-image` starts an engine and builds it first (tools/images.py).

Containers run through the Docker SDK; the two-node run through docker-compose and compose.yaml.
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import (
    BENCH_DIGEST,
    ROOT,
    SMALL,
    TF_SMALL,
    assert_valid_run,
    built_image,
    checkout_bench_digest,
    only_result,
    run_container,
)
from tools import images
from tools.cluster import compose_cli

pytestmark = pytest.mark.image

IMAGE = os.environ.get("HVDBENCH_TEST_IMAGE", "hvdbench:current-cpu")
CA = os.environ.get("HVDBENCH_CA_BUNDLE", images.DEFAULT_CA)


@pytest.fixture(scope="module")
def dk():
    return built_image(IMAGE, "test-image")


def run(dk, args, results: Path | None = None, timeout: int = 600, **options):
    return run_container(dk, IMAGE, args, results, timeout, **options)


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


@pytest.mark.smoke
def test_torch_ddp_in_container(dk, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    code, logs = run(dk, ["torch-ddp", *SMALL, "--np", "2", "--output", "/work/results"], results)
    assert code == 0, logs
    result = only_result(results)
    assert_valid_run(result, "torch-ddp", 2, "self")
    assert result["environment"]["container"] == "docker"
    # The build stamped the commit it was made from (tools/images.py stamp): the result names it. (The gate keeps
    # an image built at an earlier commit where only bench/ changed since; the publish round trip, which builds
    # the image as users get it, checks the stamp against HEAD: tests/system/test_publish.py.)
    revision = dk.images.get(IMAGE).labels["org.opencontainers.image.revision"]
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", revision), revision
    assert result["environment"]["image"] == {"stack": "current", "flavor": "cpu", "version": "0.1.0",
                                              "revision": revision}
    assert result["environment"]["packages"]["horovod"] == "0.28.1"
    assert result["telemetry"]["available"] is False


@pytest.mark.smoke
def test_tf_horovod_as_non_root_user(dk, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    os.chown(results, 1234, 1234)
    code, logs = run(dk, ["tf-horovod", *TF_SMALL, "--np", "2", "--output", "/work/results"], results,
                     user="1234:1234")
    assert code == 0, logs
    result = only_result(results)
    assert_valid_run(result, "tf-horovod", 2, "self")
    assert all(p.stat().st_uid == 1234 for p in results.iterdir())


@pytest.mark.smoke
def test_containers_run_this_checkouts_bench(dk):
    """The gate's runs bind the checkout's bench/ over the image's (run_container): what they test is this
    checkout's code, to the byte, whether or not the image was built from it."""
    code, out = run(dk, ["-I", "-c", BENCH_DIGEST], entrypoint="python3", stdout_only=True)
    assert code == 0 and out.strip() == checkout_bench_digest(), out[-2000:]


def test_no_secret_in_any_layer(dk):
    if not Path(CA).is_file():
        pytest.skip(f"no CA bundle at {CA}")
    assert images.check_secrets(IMAGE, CA) == []  # each layer read once, then recorded clean under its diff id


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
        for how in ("dirs", "save"):  # both ways of reading the layers; a leaking layer is never recorded clean
            for _ in range(2):
                hits = images.secret_hits(tag, pem, cache=tmp_path / "scans", how=how)
                assert any(h.endswith("etc/leak.pem") for h in hits), (how, hits)
        # the layers that were clean are recorded (the base's), the leaking one is not
        assert len(list((tmp_path / "scans").glob("*/*"))) == len(dk.images.get(tag).attrs["RootFS"]["Layers"]) - 1
    finally:
        try:
            dk.images.remove(tag, force=True)
        except docker.errors.APIError:
            pass


def has_compose() -> bool:
    cli = compose_cli()
    return shutil.which(cli[0]) is not None and subprocess.run([*cli, "version"], capture_output=True).returncode == 0


@pytest.mark.skipif(not has_compose(), reason="no compose: neither docker-compose nor the docker compose plugin")
def test_compose_two_nodes_over_tcp(dk, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    env = dict(os.environ, HVDBENCH_IMAGE=IMAGE, HVDBENCH_RESULTS=str(results),
               COMPOSE_PROJECT_NAME=f"hvdbench-test-{os.getpid()}")
    # The checkout's bench/ over the image's in both nodes, as every run of the gate has it (run_container).
    override = tmp_path / "bench.yaml"
    binds = "".join(f"      - {bind}\n" for bind in images.bench_binds(IMAGE))
    override.write_text("services:\n" + "".join(f"  {node}:\n    volumes:\n{binds}" for node in ("node0", "node1")))
    cmd = [*compose_cli(), "-f", str(ROOT / "compose.yaml"), "-f", str(override), "--profile", "two-node"]
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
    print(json.dumps(result["summary"]["samples_per_sec_total"]))


NO_NETWORK_RUNS = {
    "torch-ddp": ["torch-ddp", "--np", "2"],
    "torch-horovod": ["torch-horovod", "--np", "2"],
    "tf-horovod": ["tf-horovod", "--np", "2"],
    "tf-native:multiworker": ["tf-native", "--strategy", "multiworker", "--np", "2"],
    "tf-native:mirrored": ["tf-native", "--strategy", "mirrored"],
    "tf-native:ps": ["tf-native", "--strategy", "ps", "--np", "2"],
    "torch-single": ["torch-single"],
    "tf-single": ["tf-single"],
}


def run_offline(dk, args: list[str], results: Path) -> tuple[int, str]:
    """``docker run --network none``: loopback only, and a container host name nothing resolves."""
    return run_container(dk, IMAGE, args, results, network_mode="none")


def test_the_cpu_image_holds_no_gpu_package(dk):
    """The CPU flavour carries only what a CPU image needs: PyPI's torch is the CUDA build and brings the nvidia-*,
    cuda-* and Triton packages (Triton's library, loaded beside TensorFlow, killed TensorFlow ranks)."""
    probe = ["python", "-c", "import importlib.metadata as md, json, torch; print(json.dumps([torch.__version__, "
             "torch.version.cuda, sorted(d.metadata['Name'] for d in md.distributions())]))"]
    out = dk.containers.run(IMAGE, [], entrypoint=probe, network_mode="none", remove=True).decode()
    version, cuda, names = json.loads(out.strip().splitlines()[-1])
    assert version.endswith("+cpu") and cuda is None, (version, cuda)
    gpu = [n for n in names if n.lower().startswith(("nvidia-", "cuda-", "triton")) and n.lower() != "nvidia-ml-py"]
    assert not gpu, gpu  # nvidia-ml-py is NVML's pure-Python binding (telemetry), no library of its own
    print(f"{IMAGE}: {dk.images.get(IMAGE).attrs['Size'] / 1e9:.2f} GB, {len(names)} distributions, torch {version}")


def test_no_network_container_cannot_resolve_its_name(dk, tmp_path):
    """The premise of the tests below: without it they would prove nothing about the Gloo fix."""
    import docker

    probe = ["python3", "-c", "import socket; socket.getaddrinfo(socket.gethostname(), 0)"]

    with pytest.raises(docker.errors.ContainerError, match="name resolution|Name or service"):
        dk.containers.run(IMAGE, [], entrypoint=probe, network_mode="none", remove=True, stderr=True)


@pytest.mark.parametrize("name", list(NO_NETWORK_RUNS))
def test_every_mode_runs_with_no_network(dk, tmp_path, name):
    """The Horovod modes died with SIGSEGV here before the Gloo fix in docker/horovod/0.28.1.patch."""
    results = tmp_path / "results"
    results.mkdir()
    small = TF_SMALL if name.startswith("tf") else SMALL
    code, logs = run_offline(dk, [*NO_NETWORK_RUNS[name], *small, "--output", "/work/results"], results)
    assert code == 0, logs[-4000:]
    result = only_result(results)
    assert result["mode"] == name.split(":")[0] and result["status"] == "ok"
    assert result["sync"]["ranks_in_sync"] and result["sync"]["params_changed"]


@pytest.mark.parametrize("backend", ["torch", "horovod-torch", "horovod-tf", "tf"])
def test_allreduce_runs_with_no_network(dk, tmp_path, backend):
    results = tmp_path / "results"
    results.mkdir()
    code, logs = run_offline(dk, ["allreduce", "--backend", backend, "--np", "2", "--min-bytes", "4K",
                                  "--max-bytes", "64K", "--models", "", "--samples", "2", "--warmup", "1",
                                  "--output", "/work/results"], results)
    assert code == 0, logs[-3000:]
    assert len(list(results.glob("*.json"))) == 1
