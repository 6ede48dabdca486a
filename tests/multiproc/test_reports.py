"""sweep, report and compare: on checked-in results of real CPU runs, and on a real small sweep."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.commands.compare import compare, regressions
from tests.conftest import FIXTURES, bench, bench_env
from tests.multiproc import guards
from tests.unit.test_reports import by_mode_n
from tools.benchmarks import endings

A, B = FIXTURES / "sweep-a", FIXTURES / "sweep-b"


def test_compare_and_regression_gate(tmp_path):
    rows = compare(A, B)
    cells = {r.cell for r in rows}
    assert len(cells) == 5
    thr = [r for r in rows if r.metric == "samples_per_sec_total"]
    for r in thr:
        assert r.change == pytest.approx((r.b - r.a) / r.a)
    assert {r.a for r in thr} == {x.summary.samples_per_sec_total for x in by_mode_n(A).values()}
    assert {r.b for r in thr} == {x.summary.samples_per_sec_total for x in by_mode_n(B).values()}
    # the direction in which throughput dropped somewhere, and the gate around the worst drop
    first, second = (A, B) if max(r.regression for r in thr) > 0 else (B, A)
    worst = max(r.regression for r in compare(first, second) if r.metric == "samples_per_sec_total")
    assert regressions(compare(first, second), "samples_per_sec_total", 100 * worst / 2)
    assert not regressions(compare(first, second), "samples_per_sec_total", 100 * worst + 1)
    r = bench("compare", str(first), str(second), "--max-regression", f"{100 * worst / 2:.3f}")
    assert r.returncode == 1 and "regressed by" in r.stderr
    r = bench("compare", str(first), str(second), "--max-regression", f"{100 * worst + 1:.3f}")
    assert r.returncode == 0, r.stderr


def one_line(r):
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 1 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_report_bad_inputs(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no hvdbench results" in one_line(bench("report", str(empty)))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "x.json").write_text('{"name": "not a result"}')
    assert "is not an hvdbench result" in one_line(bench("report", str(foreign), "--strict"))
    mixed = tmp_path / "mixed"
    shutil.copytree(A, mixed)
    first = sorted(mixed.glob("*.json"))[0]
    data = json.loads(first.read_text())
    data["schema_version"] = 99
    first.write_text(json.dumps(data))
    assert "has schema_version 99; this hvdbench reads 1 to 3" in one_line(bench("report", str(mixed), "--strict"))
    # without --strict a file it cannot read is skipped with a warning (tests/unit/test_files.py), and the rest reported
    assert "does not exist" in one_line(bench("compare", str(A), str(tmp_path / "nope")))
    assert "unknown metric" in one_line(bench("compare", str(A), str(B), "--metric", "speed"))


SWEEP = ["sweep", "--modes", "torch-ddp,torch-horovod", "--np", "1,2", "--models", "resnet50", "--image-size", "32",
         "--batch-sizes", "2", "--warmup-steps", "0", "--steps-per-window", "1", "--windows", "2",
         "--num-classes", "10"]


def sweep_processes(folder: Path) -> list[int]:
    """Live processes of a cell writing into ``folder`` (the cell's bench and every rank it spawned)."""
    return [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if endings.alive(pid)
            and str(folder) in endings.environ(pid).get("HVDBENCH_CONFIG", "")]


def test_real_sweep_stopped_then_resumed_then_reported(tmp_path):
    folder = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "bench", *SWEEP, "--output", str(folder)], env=bench_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    manifest = folder / "manifest.json"
    deadline = time.monotonic() + guards.START_S
    while time.monotonic() < deadline:  # one cell done and the next one's ranks running
        if manifest.exists() and '"status": "ok"' in manifest.read_text() and len(sweep_processes(folder)) >= 2:
            break
        time.sleep(0.2)
    assert sweep_processes(folder), "no cell running"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=guards.END_S)
    assert proc.returncode == 143, err
    assert f"'bench sweep --resume --output {folder}' reruns it" in err and "Traceback" not in err
    assert not sweep_processes(folder)  # the running cell's ranks were stopped with it
    cells = json.loads(manifest.read_text())["cells"]
    done = {k: v for k, v in cells.items() if v["status"] == "ok"}
    assert 1 <= len(done) < 4
    assert [v["status"] for v in cells.values()].count("interrupted") == 1
    kept = {v["result"] for v in done.values()}

    r = bench("sweep", "--resume", "--output", str(folder))
    assert r.returncode == 0, r.stderr
    assert f"{len(done)} already done, {4 - len(done)} to run" in r.stderr
    assert "img/s total" in r.stderr and "sweep: done: 4 ok" in r.stderr  # the summary table, then the counts
    cells = json.loads(manifest.read_text())["cells"]
    assert len(cells) == 4 and all(c["status"] == "ok" for c in cells.values())
    assert kept <= {c["result"] for c in cells.values()}  # finished cells were not run again
    assert len(list(folder.glob("*.json"))) == 4 + 1  # four results and the manifest

    r = bench("report", str(folder))
    assert r.returncode == 0, r.stderr
    report = (folder / "report.md").read_text()
    assert (folder / "speedup.png").is_file() and "torch-horovod" in report
    # the per-rank attribution of each np 2 cell: a row per rank, each part in milliseconds
    section = report.split("## Where each rank's step goes")[1].split("\n## ")[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| torch-")]
    assert sorted((row[0].strip("| "), row[3]) for row in rows) == [
        ("torch-ddp", "0"), ("torch-ddp", "1"), ("torch-horovod", "0"), ("torch-horovod", "1")], section
    assert all(float(row[5]) > 0 and float(row[6]) > 0 for row in rows), section


def test_cell_timeout_stops_a_cell_and_the_sweep_goes_on(tmp_path):
    folder = tmp_path / "sweep"
    # each cell would run its 100,000 windows for hours: the sweep ending at all is the cells' timeout at work
    r = bench("sweep", "--modes", "torch-ddp", "--np", "1,2", "--models", "resnet50", "--image-size",
              "32", "--batch-sizes", "2", "--windows", "100000", "--cell-timeout", "8", "--output", str(folder),
              timeout=2 * guards.END_S)
    assert r.returncode == 1 and "2 cell(s) failed or timed out" in r.stderr.splitlines()[-1], r.stderr
    cells = json.loads((folder / "manifest.json").read_text())["cells"]
    assert [c["status"] for c in cells.values()] == ["timed_out", "timed_out"]
    assert all(c["seconds"] >= 8 for c in cells.values())  # stopped at its timeout, not before
    assert not sweep_processes(folder) and not list(folder.glob("*.json"))[1:]


def test_a_sweep_killed_outright_leaves_no_cell_running(tmp_path):
    folder = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "bench", *SWEEP[:3], "--np", "2", *SWEEP[5:], "--windows",
                             "100000", "--output", str(folder)], env=bench_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    def cell() -> list[int]:  # the cell's bench and the ranks it spawned: all inherit the sweep's pid
        return endings.processes_with("HVDBENCH_SWEEP_PID", str(proc.pid))

    try:
        deadline = time.monotonic() + guards.START_S
        while time.monotonic() < deadline and len(sweep_processes(folder)) < 2:
            time.sleep(0.2)
        assert len(cell()) >= 3
        proc.kill()  # SIGKILL: the sweep cannot stop its cell; the kernel does (parent-death signal)
        proc.wait()
        assert endings.wait_gone(cell, proc, guards.END_S) == []
    finally:
        for pid in [proc.pid, *cell(), *sweep_processes(folder)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()


def test_resume_needs_a_manifest(tmp_path):
    r = bench("sweep", "--resume", "--output", str(tmp_path / "none"))
    assert r.returncode == 1 and "nothing to resume" in r.stderr and "Traceback" not in r.stderr


def test_failed_cell_is_recorded_and_the_sweep_goes_on(tmp_path):
    folder = tmp_path / "sweep"
    r = bench("sweep", "--modes", "tf-native:mirrored,torch-single", "--np", "2,1", "--models", "resnet50",
              "--image-size", "32", "--batch-sizes", "2", "--warmup-steps", "0", "--steps-per-window", "1",
              "--windows", "1", "--device", "cpu", "--output", str(folder))
    assert r.returncode == 1 and "1 cell(s) failed or timed out" in r.stderr.splitlines()[-1]
    cells = json.loads((folder / "manifest.json").read_text())["cells"]
    failed = cells["tf-native-mirrored_np2_resnet50_fp32_b2"]
    assert failed["status"] == "failed" and "--np 2 > 1" in failed["error"]
    assert sum(c["status"] == "ok" for c in cells.values()) == 2
    assert os.path.exists(folder / failed["log"])


def test_the_html_report_is_one_page_a_headless_browser_draws_whole(tmp_path):
    """bench report --html on checked-in results, opened in Debian's chromium (make test installs it): nothing
    fetched from outside the page, and the screenshot shows the tables and both plots (their pixels counted). The
    screenshot is kept in results/test-artifacts/report-html.png to be looked at."""
    from PIL import Image

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (make test-browser installs Debian's as root)")
    folder = tmp_path / "sweep"
    shutil.copytree(A, folder)
    r = bench("report", str(folder), "--html")
    assert r.returncode == 0, r.stderr
    page = folder / "report.html"
    assert f"report: {page}" in r.stdout
    text = page.read_text()
    import re

    outside = [u for u in re.findall(r'(?:src|href)="([^"]*)"', text) if not u.startswith(("data:", "#"))]
    assert outside == [] and "<script" not in text
    assert text.count('src="data:image/png;base64,') == 2  # speedup.png and efficiency.png, inside the page
    assert text.count("<table>") == (folder / "report.md").read_text().count("\n|---")
    shot = tmp_path / "report-html.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2600", f"--screenshot={shot}",
                    page.as_uri()], check=True, timeout=120, capture_output=True)
    kept = Path(__file__).resolve().parents[2] / "results" / "test-artifacts" / shot.name
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, kept)
    print(f"screenshot: {kept}")
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 2600)
    colours = image.getcolors(maxcolors=1 << 20)

    def pixels(rgb: tuple[int, int, int], tolerance: int = 12) -> int:
        return sum(n for n, c in colours if all(abs(a - b) <= tolerance for a, b in zip(c, rgb, strict=True)))
    assert pixels((31, 119, 180)) > 2000  # matplotlib's first line colour: the plots were decoded and drawn
    assert pixels((243, 245, 247), 2) > 5000  # the tables' header cells (the page's own style)
