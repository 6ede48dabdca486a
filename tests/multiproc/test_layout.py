"""The package's shape: no import loop, local imports only where they keep a heavy library off the start-up
path, each part below the ones that use it, and ruff reading every file."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def test_ruff_reads_every_file_of_the_package():
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip("ruff is not installed in this environment")
    shown = subprocess.run([str(ruff), "check", "--show-files", "bench"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "bench").rglob("*.py"))
    assert sorted(str(Path(s).resolve().relative_to(ROOT)) for s in shown if s.endswith(".py")) == files
