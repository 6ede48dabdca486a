"""Real disks that refuse, and a folder a team shares: a tmpfs that fills between the record and the CSV, one
too full for the record, and an output folder remounted read-only mid-run, each in a private mount namespace
(root), each ending in one line that says what was written where, with no traceback and no partial file; and
a folder written under umask 002 that another uid reads.

Sizes: tmpfs counts whole 4 KiB pages per file. A first run in a roomy tmpfs at the same path measures the
record's size J (sized_folder keeps J away from a page boundary); the filler then leaves ceil(J / 4096) pages
free, enough for the record and not one page more for results.csv, or one page less than the record needs."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import bench_env

pytestmark = [pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root for mount namespaces and tmpfs")]

RUN = [sys.executable, "-m", "bench", "torch-single", "--model", "resnet50", "--image-size", "32", "--batch-size",
       "2", "--num-classes", "10", "--warmup-steps", "0", "--steps-per-window", "2", "--windows", "2",
       "--no-telemetry"]
PAGE = 4096


def in_namespace(script: str, tmp_path, **env) -> subprocess.CompletedProcess:
    """``script`` (bash) in a private mount namespace: its mounts vanish with it. The run has one intra-op thread:
    with two on two cores and another process busy on one, its 30 windows took over 300 s (docs/development.md,
    "A test on a busy machine")."""
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", script],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=bench_env(BENCH=" ".join(RUN), OMP_NUM_THREADS="1", **env))


MARGIN = 512  # bytes: a record's size varies a little between runs (its numbers' digits)


def sized_folder(tmp_path: Path) -> tuple[Path, int]:
    """A folder, and the size J of the record a run writes into FOLDER/out, measured in a roomy tmpfs mounted
    there (the output path is part of the record). Its path is lengthened, 150 bytes a try, until J sits at least
    MARGIN bytes from a page boundary, so that the next run's record takes exactly ceil(J / PAGE) pages. The
    padding goes in folders of at most 200 bytes each: a name longer than 255 bytes is refused."""
    for pad in range(0, 1200, 150):
        folder = tmp_path.joinpath(f"disk{pad}", *[("p" * pad)[i:i + 200] for i in range(0, pad, 200)])
        folder.mkdir(parents=True)
        r = in_namespace(f"mount -t tmpfs -o size=8m tmpfs {folder} && $BENCH --output {folder}/out "
                         f"&& stat -c %s {folder}/out/2*.json", tmp_path)
        assert r.returncode == 0, r.stderr[-2000:]
        size = int(r.stdout.strip().splitlines()[-1])
        if MARGIN <= size % PAGE <= PAGE - MARGIN:
            return folder, size
    pytest.fail("no folder name put the record's size away from a page boundary")


def fill_to(folder: str, free_pages: int) -> str:
    """Shell that fills the tmpfs at ``folder`` (mounted 1 MiB) so that ``free_pages`` pages stay free."""
    return (f"mount -t tmpfs -o size=1m tmpfs {folder} && mkdir {folder}/out "
            f"&& head -c $(( (256 - {free_pages}) * {PAGE} )) /dev/zero > {folder}/filler")


def error_line(stderr: str) -> str:
    """The rank's one error line; its spawner's line after it says that the rank wrote part of the result."""
    rank, spawner = [line for line in stderr.splitlines() if "error" in line]
    assert rank.startswith("rank 0: error: ") and "no result written" not in stderr, stderr
    assert spawner == ("error: rank 0 could not write the whole result (its error above says what was written "
                       "where); stopped the other ranks"), spawner
    return rank


def test_a_disk_full_after_the_record_keeps_the_csv_as_it_was(tmp_path):
    folder, size = sized_folder(tmp_path)
    pages = -(-size // PAGE)  # the record's pages (the output check's probe, one page, comes and goes first)
    earlier = "earlier contents\r\n"
    r = in_namespace(f"{fill_to(str(folder), pages)} && printf '{earlier}' > {tmp_path}/before.csv "
                     f"&& $BENCH --output {folder}/out; echo \"exit $?\"; ls -la {folder}/out; "
                     f"cat {folder}/out/2*.json > {tmp_path}/record.json || true", tmp_path)
    assert "exit 1" in r.stdout, r.stdout + r.stderr[-2000:]
    line = error_line(r.stderr)
    assert "the result is written to" in line and "No space left on device" in line, line
    assert "results.csv is as it was" in line and "internal error" not in r.stderr and "Traceback" not in r.stderr
    # there was none, and there is none: no empty or torn CSV (its lock file, .results.csv.lock, may be there)
    assert not [x for x in r.stdout.split() if x == "results.csv"], r.stdout
    assert json.loads((tmp_path / "record.json").read_text())["status"] == "ok"  # the record is whole


def test_a_disk_too_full_for_the_record_saves_it_elsewhere(tmp_path):
    folder, size = sized_folder(tmp_path)
    spare = tmp_path / "spare"
    pages = -(-size // PAGE) - 1  # one page short of the record; the output check's probe still fits
    assert pages >= 1, size
    r = in_namespace(f"{fill_to(str(folder), pages)} && $BENCH --output {folder}/out; echo \"exit $?\"; "
                     f"ls -a {folder}/out", tmp_path, HVDBENCH_FALLBACK_DIR=str(spare))
    assert "exit 1" in r.stdout, r.stdout + r.stderr[-2000:]
    line = error_line(r.stderr)
    assert "No space left on device" in line and f"saved to {spare}/" in line, line
    assert [p.name for p in spare.iterdir()] and json.loads(next(spare.iterdir()).read_text())["status"] == "ok"
    assert r.stdout.split("exit 1")[1].split() == [".", ".."]  # nothing partial left in the output folder


def test_an_output_folder_remounted_read_only_mid_run(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    spare = tmp_path / "spare"
    script = (f"mount --bind {out} {out} && ($BENCH --windows 30 --output {out} 2> {tmp_path}/log; "
              f"echo \"exit $?\" > {tmp_path}/code) & "
              f"until grep -q 'window 1' {tmp_path}/log 2>/dev/null; do sleep 0.2; done; "
              f"mount -o remount,bind,ro {out}; wait; cat {tmp_path}/code; ls -a {out}")
    r = in_namespace(script, tmp_path, HVDBENCH_FALLBACK_DIR=str(spare))
    log = (tmp_path / "log").read_text()
    assert "exit 1" in r.stdout, r.stdout + log[-2000:]
    line = error_line(log)
    assert "Read-only file system" in line and f"saved to {spare}/" in line, line
    assert "Traceback" not in log and r.stdout.split("exit 1")[1].split() == [".", ".."]


@pytest.mark.skipif(shutil.which("runuser") is None, reason="needs runuser")
def test_a_teammate_reads_a_shared_results_folder(tmp_path):
    """A real run under umask 002, as on a group's project directory: the result, results.csv and the report
    are 0664, and another uid (nobody) reads every one of them."""
    import stat
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="hvdbench-shared-", dir="/tmp"))  # pytest's tree is root's alone
    shared.chmod(0o755)
    try:
        r = subprocess.run(["sh", "-c", 'umask 002 && exec "$@"', "sh", *RUN, "--output", str(shared / "out")],
                           capture_output=True, text=True, timeout=300, env=bench_env())
        assert r.returncode == 0, r.stderr[-2000:]
        r = subprocess.run(["sh", "-c", 'umask 002 && exec "$@"', "sh", sys.executable, "-m", "bench", "report",
                            str(shared / "out")], capture_output=True, text=True, timeout=300, env=bench_env())
        assert r.returncode == 0, r.stderr[-2000:]
        kept = [p for p in (shared / "out").iterdir()]
        assert {p.suffix for p in kept} >= {".json", ".csv", ".md", ".png"}, kept
        for path in kept:
            assert stat.S_IMODE(path.stat().st_mode) == 0o664, (path, oct(path.stat().st_mode))
            read = subprocess.run(["runuser", "-u", "nobody", "--", "cat", str(path)], capture_output=True)
            assert read.returncode == 0 and read.stdout == path.read_bytes(), (path, read.stderr)
    finally:
        shutil.rmtree(shared)
