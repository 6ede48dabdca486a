"""README's set-up on a bare Debian 12: `make bench` as root in a container of the debootstrapped minimal root
(tools/images.py base: `debootstrap --variant=minbase`, no Python, compiler, MPI or CA certificates), holding only
what README says a bare machine needs first (Python 3, make, git) and this checkout's files. The set-up must
install everything else itself (tools/setup.sh: python3-venv, python3-dev, OpenMPI, cmake, g++, patch, the venv,
Horovod compiled with the project's patch) and `make bench` must print its result table and write a valid result.

The container takes this machine's package sources as any machine here has them: apt's mirror (the base image's
own) and pip's configuration with the local wheel folders it names (torch's CPU wheel is one: PyPI's torch pulls
GBs of CUDA packages), read-only. Nothing is cached between runs: no venv, no Horovod wheel, no pip cache.

Its own tier (make test-bare-debian), keyed by the set-up's files alone (tools/tier_cache.py): it reruns when they
change, not on every change to bench/, which the lower tiers run from the same set-up on every gate.
"""

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT, assert_valid_run, only_result

pytestmark = [pytest.mark.bare_debian, pytest.mark.timeout(3600)]

BASE = "hvdbench-base:bookworm"
README_FIRST = ["python3", "make", "git"]  # README's "Two commands": what a bare machine has before make
# This machine's pip configuration and the folders it points at, bound read-only where the host has them, and its
# CA bundle beside the container's own (which the set-up's packages write: ca-certificates comes with them).
PIP_SOURCES = ["/etc/pip.conf", "/etc/xdg/pip", "/opt/wheels", "/opt/pypi", "/opt/pypi-more"]
HOST_CA, CA_IN = "/etc/ssl/certs/ca-certificates.crt", "/opt/host-ca/ca-certificates.crt"


def checkout_copy(dest: Path) -> None:
    """The files a clone of this checkout holds (tracked, and untracked but not ignored), as they are now."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    files = [n for n in names if n and (ROOT / n).is_file()]
    packed = subprocess.run(["tar", "-C", str(ROOT), "--null", "-T", "-", "-cf", "-"],
                            input="\0".join(files).encode(), capture_output=True, check=True).stdout
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-C", str(dest), "-xf", "-"], input=packed, check=True)


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """`make bench` in the bare container: (its exit code, its output, the checkout folder it ran in, seconds)."""
    made = subprocess.run(["python3", "-m", "tools.images", "base"], cwd=ROOT, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-2000:]
    src = tmp_path_factory.mktemp("bare") / "hvdbench"
    checkout_copy(src)
    name = f"hvdbench-bare-{uuid.uuid4().hex[:8]}"
    binds = [f"--volume={p}:{p}:ro" for p in PIP_SOURCES if os.path.exists(p)]
    if os.path.exists(HOST_CA):
        binds += [f"--volume={HOST_CA}:{CA_IN}:ro", *(f"--env={v}={CA_IN}" for v in ("PIP_CERT", "SSL_CERT_FILE"))]
    binds += [f"--env={k}={v}" for k, v in os.environ.items() if k.startswith("PIP_") and k != "PIP_CERT"]
    script = ("set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; "
              f"apt-get install -y -qq --no-install-recommends {' '.join(README_FIRST)} >/dev/null; "
              "echo \"bare: $(python3 --version), $(make --version | head -1)\"; "
              "if python3 -c 'import ensurepip' 2>/dev/null; then echo 'bare: ensurepip present'; fi; "
              "start=$(date +%s); make bench; echo \"bare: make bench took $(( $(date +%s) - start )) s\"; "
              "du -sm /hvdbench/.venv | sed 's/^/bare: venv MiB /'; "
              ".venv/bin/python -c 'import horovod, horovod.torch, horovod.tensorflow; "
              "print(\"bare: horovod\", horovod.__version__)'")
    start = time.monotonic()
    try:
        r = subprocess.run(["docker", "run", "--rm", f"--name={name}", f"--volume={src}:/hvdbench",
                            "--workdir=/hvdbench", *binds, BASE, "bash", "-c", script],
                           capture_output=True, text=True, errors="replace", timeout=3300)
    finally:  # a timeout or a stop leaves no container running
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    seconds = time.monotonic() - start
    print("\n".join(line for line in r.stdout.splitlines() if line.startswith("bare: ")), f"\nin {seconds:.0f} s")
    yield r, src, seconds
    # the venv and results were written by root in the container: gone with the folder
    subprocess.run(["rm", "-rf", str(src)], check=False)


def test_make_bench_sets_up_and_runs_on_a_bare_debian_12(bare):
    r, src, _ = bare
    assert r.returncode == 0, (r.stdout[-4000:] + r.stderr[-4000:])
    assert "bare: ensurepip present" not in r.stdout  # the root lacked venv's ensurepip before the set-up
    installing = [line for line in r.stderr.splitlines() if line.startswith("setup: installing")]
    assert installing and {"python3-venv", "python3-dev", "openmpi-bin", "g++"} <= set(installing[0].split())
    result = only_result(src / "results")
    assert_valid_run(result, "torch-ddp", 2, result["launcher"])
    assert "result: " in r.stdout  # the run's table, then where its result is
    assert "bare: horovod 0.28.1" in r.stdout  # built with the patch, imported with both frameworks
