"""The package's shape: no import loop, local imports only where they keep a heavy library off the start-up
path, each part below the ones that use it, and ruff reading every file."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tools import tier_cache


def test_ruff_reads_every_file_of_the_package():
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip("ruff is not installed in this environment")
    shown = subprocess.run([str(ruff), "check", "--show-files", "bench"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "bench").rglob("*.py"))
    assert sorted(str(Path(s).resolve().relative_to(ROOT)) for s in shown if s.endswith(".py")) == files


def test_the_tools_have_one_home_and_no_test_reaches_them_by_path():
    """Every Python file of the repository is the package's, a test's or a tool's in the tools package (vendored
    scripts aside), each tools folder is a package, and no test or tool edits sys.path to find another."""
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert tracked
    vendored = "tools/benchmarks/reference/"
    homeless = [f for f in tracked if not f.startswith(("bench/", "tests/", "tools/"))]
    assert homeless == []
    for folder in {str(Path(f).parent) for f in tracked if f.startswith("tools/") and not f.startswith(vendored)}:
        assert (ROOT / folder / "__init__.py").is_file(), folder
    tricks = [f for f in tracked if not f.startswith(vendored) and f != "tests/multiproc/test_layout.py"
              and "sys.path.insert" in (ROOT / f).read_text()]
    assert tricks == []


def test_every_input_of_every_system_tier_is_a_tracked_path():
    """A moved or renamed file must not drop out of a tier's key unnoticed (then a change to it would skip the
    tier that tests it)."""
    missing = [(tier, path) for tier, paths in tier_cache.INPUTS.items()
               for path in [*paths, *([] if tier in tier_cache.OWN_ONLY else tier_cache.COMMON)]
               if not tier_cache.listed([path])]
    assert missing == []


def test_a_tiers_files_are_those_git_would_add(tmp_path, monkeypatch):
    """An untracked file under bench/ reaches the images and the editable venv, so it is in the key; an ignored
    one (bytecode, a build folder) is not."""
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench/cli.py").write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text("__pycache__/\n")
    git("init", "-q")
    git("add", ".")
    (tmp_path / "bench/new.py").write_text("y = 2\n")
    (tmp_path / "bench/__pycache__").mkdir()
    (tmp_path / "bench/__pycache__/cli.pyc").write_bytes(b"\0")
    monkeypatch.setattr(tier_cache, "ROOT", tmp_path)
    assert tier_cache.listed(["bench"]) == ["bench/cli.py", "bench/new.py"]


def test_every_tool_imports():
    """Each tool and benchmark imports in one process (its work waits for __main__): a tool that still names a
    function the package renamed fails here, not when someone next runs its make target."""
    names = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "tools").rglob("*.py")
                   if "reference" not in p.parts and p.name != "__init__.py")
    assert len(names) >= 28
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    r = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
