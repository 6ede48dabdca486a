"""The Singularity/Apptainer recipes: generated from docker/ by spython, in sync, complete.

The SIFs themselves are built and run by tests/system/test_apptainer.py (the system tier).
"""

import subprocess
import sys

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "singularity"))


def test_committed_definitions_are_what_the_generator_makes_today():
    r = subprocess.run([sys.executable, str(ROOT / "singularity" / "generate.py"), "--check"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
