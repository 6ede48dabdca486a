"""The test tiers themselves: every test gets exactly one, the unit tier's guard, the system tier's pass cache
(tools/tier_cache.py) and the times summary (tools/times.py)."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT, TESTS, TIERS, UnitTierViolation, misplaced, tier_of
from tools import tier_cache, times


def test_a_tests_folder_is_its_tier_and_its_marks_must_agree():
    assert TIERS == ("unit", "framework", "multiproc", "system")
    for tier in TIERS:
        assert tier_of(TESTS / tier / "test_x.py") == tier
        assert (TESTS / tier).is_dir() and (TESTS / tier / "__init__.py").is_file()
    assert tier_of(TESTS / "test_x.py") is None and tier_of(ROOT / "bench" / "cli.py") is None
    assert misplaced("unit", {"parametrize", "horovod"}) is None
    assert misplaced("multiproc", {"horovod", "gpu"}) is None
    assert misplaced("system", {"image"}) is None
    assert "move it" in misplaced("unit", {"multiproc"})
    assert "move it" in misplaced("framework", {"unit"})
    assert "move it to system/" in misplaced("multiproc", {"slurm"})
    assert "marker of what it needs" in misplaced("system", set())
    assert "one of tests/" in misplaced(None, set())
    assert misplaced("multiproc", {"alone"}) is None
    assert "only the multiproc tier" in misplaced("framework", {"alone"})


def test_every_test_file_sits_in_a_tier_folder():
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert loose == [], f"test files outside tests/<tier>/: {loose}"


def test_the_unit_guard_refuses_a_process():
    with pytest.raises(UnitTierViolation, match="mark it multiproc"):
        subprocess.run(["true"])  # the guard replaced Popen for this unit test


def test_the_makefile_selects_each_tier_by_its_folders_marker():
    text = (ROOT / "Makefile").read_text()
    for tier in ("unit", "framework", "multiproc"):
        assert f"$(RUN_TESTS) {tier} -m {tier} $(or $(PYTEST_ARGS),tests/{tier})" in text
    assert "SYSTEM_TESTS = $(or $(PYTEST_ARGS),tests/system)" in text
    for target in ("test-unit", "test-framework", "test-multiproc", "test-system"):
        assert f"\n{target}:" in text and target in text.split("\ntest: ")[1].split("\n\n")[0]


def test_a_system_tiers_key_follows_its_inputs(tmp_path, monkeypatch):
    cache = tier_cache
    files = {"bench/cli.py": "one", "bench/records/env.py": "env", "docs/x.md": "doc", "docker/Dockerfile": "FROM x",
             "tests/system/test_images.py": "t", "bench/commands/diagnose/rules.toml": "rules"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(cache, "ROOT", tmp_path)
    monkeypatch.setattr(cache, "tracked", lambda paths: sorted(n for n in files if any(
        n == p or n.startswith(p + "/") for p in paths)))
    monkeypatch.setattr(cache, "tool_versions", lambda tier: ["docker: 20.10"])
    image, _ = cache.key("image")
    pull, _ = cache.key("sif_pull")
    diagnose, _ = cache.key("diagnose")
    (tmp_path / "docs/x.md").write_text("another doc")
    assert cache.key("image")[0] == image  # the docs are no input of the images
    (tmp_path / "bench/cli.py").write_text("two")
    bench_changed = cache.key("image")[0]
    assert bench_changed != image  # bench/ is in every image: every system tier runs again
    assert cache.key("sif_pull")[0] == pull  # but the pull path's: it reads only bench/records/env.py
    assert cache.key("diagnose")[0] == diagnose  # nor diagnose's: keyed by its own code
    (tmp_path / "bench/commands/diagnose/rules.toml").write_text("other thresholds")
    assert cache.key("diagnose")[0] != diagnose
    (tmp_path / "bench/records/env.py").write_text("env reads the digest another way")
    assert cache.key("sif_pull")[0] != pull
    monkeypatch.setattr(cache, "tool_versions", lambda tier: ["docker: 29.0"])
    assert cache.key("image")[0] != bench_changed  # another Docker: run again


def test_the_times_summary_reads_every_tier(tmp_path, capsys, monkeypatch):
    (tmp_path / "unit.wall").write_text("12 0\n")
    (tmp_path / "unit.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.test_a" name="test_x" time="3.5"/>'
        '<testcase classname="tests.test_a" name="test_y" time="0.1"><skipped/></testcase>'
        '</testsuite></testsuites>')
    (tmp_path / "image.wall").write_text("0 0 cached\n")
    (tmp_path / "make-test.total").write_text("75\n")
    (tmp_path / "system-prepare.beside").write_text("61 0\n")
    (tmp_path / "venv.took").write_text("9 0\n")
    monkeypatch.setattr(sys, "argv", ["test-times", str(tmp_path)])
    times.main()
    out = capsys.readouterr().out
    assert "unit" in out and "0m12s" in out and "passed before on the same inputs" in out
    assert "make test           1m15s  of which 1m03s outside" in out  # 75 s in all, 12 s in the tiers
    assert "venv                0m09s  its set-up, first (make venv, exit 0)" in out  # not a tier: not in the 12 s
    assert "system set-up       1m01s  beside the venv's and the first tiers (make test-system-prepare, exit 0" in out
    assert "3.5  unit            tests.test_a::test_x" in out
    assert out.strip().splitlines()[-1] == "all: 1 passed, 0 failed, 1 skipped"


def tier_cache_cli(tmp_path, monkeypatch, key):
    """tools.tier_cache's command line in process, its passes and times under tmp_path and ``key`` for the
    inputs' key: a function of the arguments that returns the exit code."""
    monkeypatch.setattr(tier_cache, "CACHE", tmp_path / "passes")
    monkeypatch.setenv("HVDBENCH_TEST_TIMES", str(tmp_path / "times"))
    monkeypatch.delenv("HVDBENCH_RERUN", raising=False)
    monkeypatch.delenv("PYTEST_ARGS", raising=False)
    monkeypatch.setattr(tier_cache, "key", key)

    def call(*argv):
        monkeypatch.setattr(sys, "argv", ["tier-cache", *argv])
        try:
            tier_cache.main()
            return 0
        except SystemExit as exc:
            return exc.code
    return call


def test_a_recorded_pass_skips_only_the_same_inputs(tmp_path, monkeypatch, capsys):
    inputs = {"key": "a" * 64}
    call = tier_cache_cli(tmp_path, monkeypatch, lambda tier: (inputs["key"], []))

    assert call("fresh", "image") == 1  # never passed
    assert call("record", "image") == 0
    assert call("fresh", "image") == 0 and "passed at" in capsys.readouterr().out
    assert (tmp_path / "times" / "image.wall").read_text().split() == ["0", "0", "cached"]
    monkeypatch.setenv("HVDBENCH_RERUN", "1")
    assert call("fresh", "image") == 1
    monkeypatch.delenv("HVDBENCH_RERUN")
    inputs["key"] = "b" * 64  # an input changed
    assert call("fresh", "image") == 1
    monkeypatch.setenv("PYTEST_ARGS", "-k one_test")
    call("record", "image")  # a partial run records nothing
    monkeypatch.delenv("PYTEST_ARGS")
    assert call("fresh", "image") == 1


def test_stale_names_the_tiers_that_would_run_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """`stale T...` (what make test-system-prepare asks before building for those tiers): exit 0 naming the tiers
    without a pass on their current inputs, 1 when every one has; no times file either way."""
    call = tier_cache_cli(tmp_path, monkeypatch, lambda tier: (tier * 8, []))

    assert call("stale", "image", "cluster") == 0
    assert capsys.readouterr().out.split()[-2:] == ["image", "cluster"]
    assert call("record", "image") == 0
    assert call("stale", "image", "cluster") == 0
    assert capsys.readouterr().out.split()[-1] == "cluster"
    assert call("record", "cluster") == 0
    assert call("stale", "image", "cluster") == 1
    assert "stale: none" in capsys.readouterr().out
    assert not (tmp_path / "times").exists()
    monkeypatch.setenv("HVDBENCH_RERUN", "1")
    assert call("stale", "cluster") == 0
    assert call("fresh", "image", "cluster") == 2  # fresh, record and key take one tier
