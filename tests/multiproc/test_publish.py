"""Publishing the images (tools/publish.py, make publish): the plan, the release workflow, the refusals, and the
CPU image's round trip through a registry running here (tools/registry-up.sh: Debian's docker-registry)."""

import json
import re
import subprocess

import pytest

from tests.conftest import ROOT, tool
from tools import images


# -- with processes: the command line ------------------------------------------------------------------------------
def publish_cli(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([*tool("publish"), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def test_make_publish_dry_run_lists_every_flavour():
    r = subprocess.run(["make", "--no-print-directory", "publish", "REGISTRY=ghcr.io/o", "STACK=all", "FLAVOR=all",
                        "DRY_RUN=1"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    shown = [json.loads(part) for part in re.split(r"(?m)^(?=\{)", r.stdout) if part.strip().startswith("{")]
    assert {(p["stack"], p["flavor"]) for p in shown} == {(s, f) for s in images.stacks() for f in images.FLAVORS}
    assert all(p["push"] and p["dockerfile"].startswith("docker/Dockerfile") for p in shown)


@pytest.mark.parametrize("args, says", [
    (["--registry", "Bad_Host/x"], "is not a registry reference"),
    (["--registry", "ghcr.io/o", "--stack", "nope"], "unknown stack nope"),
    (["--registry", "ghcr.io/o", "--flavor", "tpu"], "unknown flavor tpu"),
])
def test_bad_publish_arguments_are_one_line(args, says):
    r = publish_cli(*args, "--dry-run", timeout=120)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not r.stdout
