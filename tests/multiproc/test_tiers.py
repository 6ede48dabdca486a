"""tools/run-tests.sh for real: the multiproc tier's two passes (the tests two files at a time, then those marked
alone with nothing beside them), each pass's times kept, and an empty selection refused (the summary's and the
pass cache's arithmetic: tests/unit/test_tiers.py). And tools/apt-install.sh, which lets the set-up scripts that
make test runs at the same time take turns at apt."""

import os
import subprocess
import sys

from tests.conftest import ROOT

# A tier of its own in a scratch folder: each test writes which pytest process ran it (its xdist worker, or none).
INI = """[pytest]
markers =
    scratch: the scratch tier
    alone: with nothing beside it
"""
TESTS = """import os
import pytest

pytestmark = pytest.mark.scratch


def where(name):
    with open(os.environ["WHERE"], "a") as f:
        f.write(f"{name} {os.environ.get('PYTEST_XDIST_WORKER', 'none')}\\n")


def test_one():
    where("one")


@pytest.mark.alone
def test_alone():
    where("alone" + (" after" if os.path.exists(os.environ["WHERE"] + ".ended") else ""))
"""


def run_tests(tmp_path, workers: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HVDBENCH_TEST_TIMES": str(tmp_path / "times"), "HVDBENCH_TEST_WORKERS": workers,
           "WHERE": str(tmp_path / "where"), **env}
    return subprocess.run([str(ROOT / "tools" / "run-tests.sh"), sys.executable, "scratch", "-m", "scratch",
                           "-p", "no:cacheprovider", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)


def test_two_workers_then_the_alone_tests_on_their_own(tmp_path):
    (tmp_path / "pytest.ini").write_text(INI)
    (tmp_path / "test_a.py").write_text(TESTS)
    (tmp_path / "test_b.py").write_text(TESTS + "\n\ndef test_two():\n    where('one')\n")
    r = run_tests(tmp_path, "2")
    assert r.returncode == 0, r.stdout + r.stderr
    ran = sorted((tmp_path / "where").read_text().split("\n")[:-1])
    shared = [line for line in ran if line.startswith("one")]
    assert len(shared) == 3 and all(line.split()[1].startswith("gw") for line in shared), ran
    assert ran.count("alone none") == 2, ran  # both files' alone tests, in the second pass, not under xdist
    times = tmp_path / "times"
    assert (times / "scratch.wall").read_text().split()[1] == "0"
    assert (times / "scratch-alone.wall").read_text().split()[1] == "0"
    assert 'tests="2"' in (times / "scratch-alone.xml").read_text()

    (tmp_path / "where").unlink()
    r = run_tests(tmp_path, "2", "-k", "alone")  # the first pass selects nothing: not a failure
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted((tmp_path / "where").read_text().split("\n")[:-1]) == ["alone none"] * 2

    r = run_tests(tmp_path, "2", "-k", "nothing_is_called_this")
    assert r.returncode == 1 and "collected no tests for scratch" in r.stderr

    (tmp_path / "test_b.py").write_text(TESTS + "\n\ndef test_two():\n    assert False\n")
    r = run_tests(tmp_path, "2")  # a failure in the first pass fails the tier, and the second pass still runs
    assert r.returncode == 1 and (times / "scratch-alone.wall").read_text().split()[1] == "0"

    r = run_tests(tmp_path, "1")  # one worker: one pass, alone tests among the rest
    assert r.returncode == 1 and "1 failed, 4 passed" in r.stdout


def test_the_alone_tests_wait_for_the_process_make_test_names(tmp_path):
    """HVDBENCH_TEST_AWAIT_PID (make test's system set-up, building images beside the first pass): the alone
    tests start only once that process has ended."""
    (tmp_path / "pytest.ini").write_text(INI)
    (tmp_path / "test_a.py").write_text(TESTS)
    # Not this test's child (init reaps it), as the set-up is not run-tests.sh's: it ends 6 s on, leaving a mark.
    pid = subprocess.run(["sh", "-c", f"(sleep 6; touch {tmp_path / 'where.ended'}) >/dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, check=True).stdout.strip()
    r = run_tests(tmp_path, "2", HVDBENCH_TEST_AWAIT_PID=pid)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "alone after none" in (tmp_path / "where").read_text().split("\n"), r.stderr
    assert f"waiting for process {pid}" in r.stderr

    r = run_tests(tmp_path, "2", "-k", "alone", HVDBENCH_TEST_AWAIT_PID=pid)  # ended already: no wait
    assert r.returncode == 0 and "waiting" not in r.stderr, r.stderr


FAKE_APT = """#!/usr/bin/env bash
echo "$1 start $(date +%s.%N)" >> "$APT_LOG"
sleep 0.3
echo "$1 end $(date +%s.%N)" >> "$APT_LOG"
"""


def test_installs_started_together_take_turns_at_apt(tmp_path):
    """Three installs at once (as the venv's set-up and the system tiers' beside it may start them): each update
    and install runs with no other apt beside it (apt's own lock would make a second `apt-get update` fail)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text(FAKE_APT)
    (bin_dir / "apt-get").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "APT_LOG": str(tmp_path / "log"),
           "HVDBENCH_APT_LOCK": str(tmp_path / "lock")}
    script = str(ROOT / "tools" / "apt-install.sh")
    runs = [subprocess.Popen([script, f"package{i}"], env=env) for i in range(3)]
    assert [r.wait(timeout=60) for r in runs] == [0, 0, 0]
    events = [line.split() for line in (tmp_path / "log").read_text().splitlines()]
    assert len(events) == 12  # update and install, each started and ended, three times
    # in time order, every start is followed by its own end: no two apt calls overlapped
    events.sort(key=lambda e: float(e[2]))
    assert [e[1] for e in events] == ["start", "end"] * 6, events
    assert [e[0] for e in events[::2]] == ["update", "install"] * 3  # each update and its install back to back
    refused = subprocess.run([script], env=env, capture_output=True, text=True)
    assert refused.returncode == 2 and "usage" in refused.stderr


def test_the_measurement_age_counts_the_commits_to_bench_and_the_lower_tests_since_it(tmp_path, monkeypatch):
    """tools.tier_cache.measurement_age over a real git history: the commits since the one tools/lower-covered.txt
    names that touched bench/ or a lower tier's tests, and not the others."""
    from tools import surface, tier_cache

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                              capture_output=True, text=True).stdout.strip()

    def commit(name: str) -> str:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"{name} {os.urandom(4).hex()}\n")
        git("add", "-A")
        git("commit", "-q", "-m", name)
        return git("rev-parse", "--short", "HEAD")

    git("init", "-q")
    measured = commit("bench/a.py")
    for name in ("bench/b.py", "tests/unit/test_a.py", "docs/a.md", "tests/system/test_b.py", "tests/multiproc/t.py"):
        commit(name)
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools/lower-covered.txt").write_text(f"# bench/'s units: 1 of 1, measured at {measured} (...)\n")
    monkeypatch.setattr(tier_cache, "ROOT", tmp_path)
    monkeypatch.setattr(surface, "ROOT", tmp_path)
    monkeypatch.setattr(surface, "COVERED", tmp_path / "tools/lower-covered.txt")
    assert tier_cache.measurement_age() == (3, measured)  # bench/b.py, tests/unit, tests/multiproc
    monkeypatch.setattr(tier_cache, "STALE_AFTER", 2)
    assert f"measured 3 commits to bench, tests/unit, tests/framework, tests/multiproc ago (at {measured}; more " \
           "than 2)" in tier_cache.surface_stale()
    monkeypatch.setattr(tier_cache, "STALE_AFTER", 3)
    assert tier_cache.surface_stale() is None
    (tmp_path / "tools/lower-covered.txt").write_text("# measured at 0000000 (a commit this clone lacks)\n")
    assert tier_cache.measurement_age() == (None, "0000000")
