"""sweep, report and compare: on checked-in results of real CPU runs, and on a real small sweep."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import endings
import pytest
from conftest import bench, bench_env

from bench.commands.compare import compare, regressions
from bench.commands.report import horovod_vs_native, scaling_rows, write_report
from bench.commands.sweep import SweepConfig
from bench.errors import BenchError
from bench.records.collect import load_results, table_cells

FIXTURES = Path(__file__).parent / "fixtures"
A, B = FIXTURES / "sweep-a", FIXTURES / "sweep-b"


def by_mode_n(folder):
    return {(r["mode"], r["world_size"]): r for r in load_results([folder])}


def test_report_figures_follow_the_formulas(tmp_path):
    results = by_mode_n(A)
    rows = {(r["label"], r["n"]): r for r in scaling_rows(table_cells(load_results([A]))[0])}
    for mode in ("torch-ddp", "torch-horovod"):
        t1 = results[(mode, 1)]["summary"]["samples_per_sec_total"]
        t2 = results[(mode, 2)]["summary"]["samples_per_sec_total"]
        single = results[("torch-single", 1)]["summary"]["samples_per_sec_total"]
        assert rows[(mode, 2)]["speedup"] == pytest.approx(t2 / t1)
        assert rows[(mode, 2)]["efficiency"] == pytest.approx(t2 / (2 * t1))
        assert rows[(mode, 2)]["vs_single"] == pytest.approx(t2 / single)
        w1 = results[(mode, 1)]["summary"]["samples_per_sec_wall_total"]
        w2 = results[(mode, 2)]["summary"]["samples_per_sec_wall_total"]
        assert rows[(mode, 2)]["wall_speedup"] == pytest.approx(w2 / w1)
    versus = horovod_vs_native(*table_cells(load_results([A])))
    assert [(v["horovod"], v["native"], v["n"]) for v in versus] == [("torch-horovod", "torch-ddp", 1),
                                                                     ("torch-horovod", "torch-ddp", 2)]
    v2 = versus[1]
    h, d = results[("torch-horovod", 2)], results[("torch-ddp", 2)]
    assert v2["ratio"] == pytest.approx(h["summary"]["samples_per_sec_total"] / d["summary"]["samples_per_sec_total"])
    assert v2["runs"] == (1, 1) and v2["beyond_noise"] is None  # one launch a side: not decided

    path = write_report([A], tmp_path)
    text = path.read_text()
    assert "| torch-ddp | resnet50 32x32 b2 fp32 | 2 |" in text and "## Horovod vs native" in text
    assert f"{rows[('torch-ddp', 2)]['speedup']:.2f}" in text
    for png in ("speedup.png", "efficiency.png"):
        assert (tmp_path / png).stat().st_size > 5000
    assert len((tmp_path / "report.csv").read_text().splitlines()) == 1 + 5


@pytest.mark.multiproc
def test_compare_and_regression_gate(tmp_path):
    rows = compare(A, B)
    cells = {r["cell"] for r in rows}
    assert len(cells) == 5
    thr = [r for r in rows if r["metric"] == "samples_per_sec_total"]
    for r in thr:
        assert r["change"] == pytest.approx((r["b"] - r["a"]) / r["a"])
    assert {r["a"] for r in thr} == {x["summary"]["samples_per_sec_total"] for x in by_mode_n(A).values()}
    assert {r["b"] for r in thr} == {x["summary"]["samples_per_sec_total"] for x in by_mode_n(B).values()}
    # the direction in which throughput dropped somewhere, and the gate around the worst drop
    first, second = (A, B) if max(r["regression"] for r in thr) > 0 else (B, A)
    worst = max(r["regression"] for r in compare(first, second) if r["metric"] == "samples_per_sec_total")
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


def test_verify_allreduce_and_peak_records_in_the_folder_are_not_training_results(tmp_path):
    shared = tmp_path / "results"
    shutil.copytree(A, shared)
    (shared / "20261121T000000Z-verify-0.json").write_text(json.dumps({"kind": "verify", "modes": []}))
    (shared / "20261121T000000Z-allreduce-torch-0.json").write_text(json.dumps({"kind": "allreduce", "rows": []}))
    (shared / "peak").mkdir()
    (shared / "peak" / "node1-cpu-1t-fp32-20261121T000000Z.json").write_text(json.dumps({"kind": "peak"}))
    assert len(load_results([shared])) == len(load_results([A]))
    only = tmp_path / "only"
    only.mkdir()
    (only / "v.json").write_text(json.dumps({"kind": "verify"}))
    with pytest.raises(BenchError, match="no hvdbench training results"):
        load_results([only])


@pytest.mark.multiproc
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
    # without --strict a file it cannot read is skipped with a warning (tests/test_files.py), and the rest reported
    assert "does not exist" in one_line(bench("compare", str(A), str(tmp_path / "nope")))
    assert "unknown metric" in one_line(bench("compare", str(A), str(B), "--metric", "speed"))


def test_sweep_config_validation():
    cells = SweepConfig(modes=["torch-ddp", "torch-single", "tf-native:ps"], nps=[1, 2]).cells()
    assert [(c.label, c.np) for c in cells] == [("torch-ddp", 1), ("torch-ddp", 2), ("torch-single", 1),
                                                ("tf-native:ps", 1), ("tf-native:ps", 2)]
    for kwargs, message in (({"modes": ["nope"], "nps": [1]}, "unknown mode"),
                            ({"modes": ["torch-ddp:ps"], "nps": [1]}, "takes no strategy"),
                            ({"modes": ["torch-ddp"], "nps": [0]}, ">= 1"),
                            ({"modes": ["torch-ddp"], "nps": [1], "models": ["alexnet"]}, "unknown model")):
        with pytest.raises(BenchError, match=message):
            SweepConfig(**kwargs)


SWEEP = ["sweep", "--modes", "torch-ddp,torch-horovod", "--np", "1,2", "--models", "resnet50", "--image-size", "32",
         "--batch-sizes", "2", "--warmup-steps", "0", "--steps-per-window", "1", "--windows", "2",
         "--num-classes", "10"]


def sweep_processes(folder: Path) -> list[int]:
    """Live processes of a cell writing into ``folder`` (the cell's bench and every rank it spawned)."""
    return [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if endings.alive(pid)
            and str(folder) in endings.environ(pid).get("HVDBENCH_CONFIG", "")]


@pytest.mark.multiproc
def test_real_sweep_stopped_then_resumed_then_reported(tmp_path):
    folder = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "bench", *SWEEP, "--output", str(folder)], env=bench_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    manifest = folder / "manifest.json"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # one cell done and the next one's ranks running
        if manifest.exists() and '"status": "ok"' in manifest.read_text() and len(sweep_processes(folder)) >= 2:
            break
        time.sleep(0.2)
    assert sweep_processes(folder), "no cell running"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
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


@pytest.mark.multiproc
def test_cell_timeout_stops_a_cell_and_the_sweep_goes_on(tmp_path):
    folder = tmp_path / "sweep"
    start = time.monotonic()
    r = bench("sweep", "--modes", "torch-ddp", "--np", "1,2", "--models", "resnet50", "--image-size",
              "32", "--batch-sizes", "2", "--windows", "100000", "--cell-timeout", "8", "--output", str(folder),
              timeout=200)
    assert r.returncode == 1 and "2 cell(s) failed or timed out" in r.stderr.splitlines()[-1], r.stderr
    assert time.monotonic() - start < 120
    cells = json.loads((folder / "manifest.json").read_text())["cells"]
    assert [c["status"] for c in cells.values()] == ["timed_out", "timed_out"]
    assert all(8 <= c["seconds"] < 36 for c in cells.values())
    assert not sweep_processes(folder) and not list(folder.glob("*.json"))[1:]


@pytest.mark.multiproc
def test_a_sweep_killed_outright_leaves_no_cell_running(tmp_path):
    folder = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "bench", *SWEEP[:3], "--np", "2", *SWEEP[5:], "--windows",
                             "100000", "--output", str(folder)], env=bench_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    def cell() -> list[int]:  # the cell's bench and the ranks it spawned: all inherit the sweep's pid
        return endings.processes_with("HVDBENCH_SWEEP_PID", str(proc.pid))

    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(sweep_processes(folder)) < 2:
            time.sleep(0.2)
        assert len(cell()) >= 3
        proc.kill()  # SIGKILL: the sweep cannot stop its cell; the kernel does (parent-death signal)
        proc.wait()
        assert endings.wait_gone(cell, proc, 15) == []
    finally:
        for pid in [proc.pid, *cell(), *sweep_processes(folder)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()


@pytest.mark.multiproc
def test_resume_needs_a_manifest(tmp_path):
    r = bench("sweep", "--resume", "--output", str(tmp_path / "none"))
    assert r.returncode == 1 and "nothing to resume" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.multiproc
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


def _run(mode, rate, created, hosts=("h1",), **config):
    """A minimal result for the cell logic: what table_cells, key_of and significant read."""
    cfg = {"model": "resnet50", "precision": "fp32", "batch_size": 2, "image_size": 32, "num_classes": 10,
           "device": "cpu", "fp16_allreduce": False, "channels_last": False, "strategy": None, **config}
    return {"mode": mode, "world_size": 2, "created_utc": created, "config": cfg,
            "environment": {"ranks": [{"host": h, "device": "cpu"} for h in hosts]},
            "summary": {"samples_per_sec_total": rate}}


def test_runs_that_differ_in_device_exchange_or_layout_are_different_cells(capsys):
    """Numbers issue, finding 10: the device and GPU model, --fp16-allreduce, --channels-last and the classes
    are part of a cell; an A/B pair in one folder is two cells, never one cell and a repeat. A run on other hosts
    is not a repeat either: left out, and named in a warning."""
    gpu = {"device": "cuda"}
    runs = [_run("torch-ddp", 10, "1"), _run("torch-ddp", 11, "2", fp16_allreduce=True),
            _run("torch-ddp", 12, "3", channels_last=True), _run("torch-ddp", 13, "4", num_classes=1000),
            _run("torch-ddp", 14, "5", **gpu), _run("torch-ddp", 15, "6", hosts=("h9",))]
    runs[4]["environment"]["ranks"] = [{"host": "h1", "device": "cuda:0 NVIDIA H100 80GB HBM3"}]
    chosen, repeats = table_cells(runs)
    assert len(chosen) == 5 and not any(repeats.values())
    assert any(k.device == "cuda NVIDIA H100 80GB HBM3" for k in chosen)
    assert "also ran on other hosts (h1) than its newest run (h9)" in capsys.readouterr().err
    chosen, repeats = table_cells([_run("torch-ddp", 10, "1"), _run("torch-ddp", 11, "2")])
    assert [len(v) for v in repeats.values()] == [1]  # the same cell on the same hosts: a repeat


def test_a_difference_is_significant_only_from_repeated_runs():
    """Numbers issue, finding 8: two launches' within-run intervals leave out run-to-run variance; the call
    needs two or more runs a side and non-overlapping between-run intervals."""
    from bench.records.collect import significant

    a = [_run("torch-ddp", v, str(i)) for i, v in enumerate([100.0, 101.0, 99.0])]
    b = [_run("torch-horovod", v, str(i)) for i, v in enumerate([120.0, 121.0, 119.0])]
    noisy = [_run("torch-horovod", v, str(i)) for i, v in enumerate([90.0, 130.0, 110.0])]
    assert significant(a, b) is True and significant(a, noisy) is False
    assert significant(a[:1], b[:1]) is None and significant(a, b[:1]) is None
