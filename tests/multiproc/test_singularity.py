"""The Singularity/Apptainer recipes: generated from docker/ by spython, in sync, complete.

The SIFs themselves are built and run by tests/system/test_apptainer.py (the system tier).
"""

import subprocess

from tests.conftest import ROOT, tool


def test_committed_definitions_are_what_the_generator_makes_today():
    r = subprocess.run([*tool("recipes"), "--check"], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
