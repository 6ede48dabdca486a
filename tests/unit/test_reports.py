"""sweep, report and compare: on checked-in results of real CPU runs, and on a real small sweep."""

import json
import shutil
from pathlib import Path

import pytest

from bench.commands.report import horovod_vs_native, scaling_rows, write_report
from bench.commands.sweep import SweepMatrix
from bench.data.feed import Input
from bench.errors import BenchError
from bench.records.collect import load_results, table_cells
from tests import samples
from tests.conftest import FIXTURES, ROOT

A, B = FIXTURES / "sweep-a", FIXTURES / "sweep-b"


def by_mode_n(folder):
    return {(r.mode, r.world_size): r for r in load_results([folder])}


def test_report_figures_follow_the_formulas(tmp_path):
    results = by_mode_n(A)
    rows = {(r.label, r.n): r for r in scaling_rows(table_cells(load_results([A]))[0])}
    for mode in ("torch-ddp", "torch-horovod"):
        t1 = results[(mode, 1)].summary.samples_per_sec_total
        t2 = results[(mode, 2)].summary.samples_per_sec_total
        single = results[("torch-single", 1)].summary.samples_per_sec_total
        assert rows[(mode, 2)].speedup == pytest.approx(t2 / t1)
        assert rows[(mode, 2)].efficiency == pytest.approx(t2 / (2 * t1))
        assert rows[(mode, 2)].vs_single == pytest.approx(t2 / single)
        w1 = results[(mode, 1)].summary.samples_per_sec_wall_total
        w2 = results[(mode, 2)].summary.samples_per_sec_wall_total
        assert rows[(mode, 2)].wall_speedup == pytest.approx(w2 / w1)
    versus = horovod_vs_native(*table_cells(load_results([A])))
    assert [(v.horovod, v.native, v.n) for v in versus] == [("torch-horovod", "torch-ddp", 1),
                                                                     ("torch-horovod", "torch-ddp", 2)]
    v2 = versus[1]
    h, d = results[("torch-horovod", 2)], results[("torch-ddp", 2)]
    assert v2.ratio == pytest.approx(h.summary.samples_per_sec_total / d.summary.samples_per_sec_total)
    assert v2.runs == (1, 1) and v2.beyond_noise is None  # one launch a side: not decided

    path = write_report([A], tmp_path)
    text = path.read_text()
    assert "| torch-ddp | resnet50 32x32 b2 fp32, 10 classes | 2 |" in text and "## Horovod vs native" in text
    assert f"{rows[('torch-ddp', 2)].speedup:.2f}" in text
    for png in ("speedup.png", "efficiency.png"):
        assert (tmp_path / png).stat().st_size > 5000
    assert len((tmp_path / "report.csv").read_text().splitlines()) == 1 + 5


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


def test_sweep_config_validation():
    cells = SweepMatrix(modes=["torch-ddp", "torch-single", "tf-native:ps"], nps=[1, 2]).cells()
    assert [(c.label, c.np) for c in cells] == [("torch-ddp", 1), ("torch-ddp", 2), ("torch-single", 1),
                                                ("tf-native:ps", 1), ("tf-native:ps", 2)]
    for kwargs, message in (({"modes": ["nope"], "nps": [1]}, "unknown mode"),
                            ({"modes": ["torch-ddp:ps"], "nps": [1]}, "takes no strategy"),
                            ({"modes": ["torch-ddp"], "nps": [0]}, ">= 1"),
                            ({"modes": ["torch-ddp"], "nps": [1], "models": ["alexnet"]}, "unknown model")):
        with pytest.raises(BenchError, match=message):
            SweepMatrix(**kwargs)


def test_a_sweep_over_both_frameworks_and_libraries_gives_each_cell_the_options_its_mode_takes():
    """--compile and --fused-optimizer reach the PyTorch cells, --xla the TensorFlow ones, Horovod's knobs the Horovod
    ones; an option no mode of the sweep takes is still the cell's own one-line refusal."""
    common = {"compile": "default", "fused_optimizer": True, "xla": True, "cycle_time": 5.0}
    sweep = SweepMatrix(modes=["torch-ddp", "torch-horovod", "tf-horovod", "tf-native"], nps=[2], common=common)
    configs = {c.mode: c.config(sweep.common_for(c), ROOT) for c in sweep.cells()}
    assert {m: (c.compile, c.fused_optimizer, c.xla, c.cycle_time) for m, c in configs.items()} == {
        "torch-ddp": ("default", True, None, None), "torch-horovod": ("default", True, None, 5.0),
        "tf-horovod": (None, None, True, 5.0), "tf-native": (None, None, True, None)}
    with pytest.raises(BenchError, match="--xla applies to the TensorFlow modes; torch-ddp is PyTorch"):
        SweepMatrix(modes=["torch-ddp", "torch-single"], nps=[1], common={"xla": True})
    with pytest.raises(BenchError, match="--cycle-time does not apply to torch-ddp"):
        SweepMatrix(modes=["torch-ddp", "tf-native"], nps=[2], common={"cycle_time": 5.0})


def _run(mode, rate, created, hosts=("h1",), rank_device="cpu", **config):
    """A result for the cell logic (what table_cells, key_of and significant read): the fixture's, with these."""
    cfg = {"model": "resnet50", "precision": "fp32", "batch_size": 2, "image_size": 32, "num_classes": 10,
           "device": "cpu", "fp16_allreduce": False, "channels_last": False, "strategy": None, **config}
    return samples.result(mode=mode, world_size=2, created_utc=created, config=cfg,
                          environment={"ranks": [{"rank": i, "local_rank": 0, "host": h, "device": rank_device}
                                                 for i, h in enumerate(hosts)]},
                          summary={"samples_per_sec_total": rate})


def test_runs_that_differ_in_device_exchange_or_layout_are_different_cells(capsys):
    """Numbers issue, finding 10: the device and GPU model, --fp16-allreduce, --channels-last and the classes
    are part of a cell; an A/B pair in one folder is two cells, never one cell and a repeat. A run on other hosts
    is not a repeat either: left out, and named in a warning."""
    gpu = {"device": "cuda"}
    runs = [_run("torch-ddp", 10, "1"), _run("torch-ddp", 11, "2", fp16_allreduce=True),
            _run("torch-ddp", 12, "3", channels_last=True), _run("torch-ddp", 13, "4", num_classes=1000),
            _run("torch-ddp", 14, "5", rank_device="cuda:0 NVIDIA H100 80GB HBM3", **gpu),
            _run("torch-ddp", 15, "6", hosts=("h9",))]
    chosen, repeats = table_cells(runs)
    assert len(chosen) == 5 and not any(repeats.values())
    assert any(k.device == "cuda NVIDIA H100 80GB HBM3" for k in chosen)
    assert "also ran on other hosts (h1) than its newest run (h9)" in capsys.readouterr().err
    chosen, repeats = table_cells([_run("torch-ddp", 10, "1"), _run("torch-ddp", 11, "2")])
    assert [len(v) for v in repeats.values()] == [1]  # the same cell on the same hosts: a repeat


def test_runs_on_other_datasets_or_loader_workers_are_different_cells():
    """A cell's data source names the dataset (format, classes, training samples), the loader's workers and a goal:
    two datasets of one format, 2 and 8 workers, or a throughput run and one trained to a target, are two cells;
    one dataset at two paths is one cell, repeated."""
    def on(path, classes=10, samples=1797, workers=(2,), **config):
        run = _run("torch-ddp", 10, path, **config)
        run.input = Input(source="dataset", path=path, format="imagefolder", loader="torch", classes=classes,
                          train_samples=samples, workers=list(workers), definition="d")
        return run

    chosen, repeats = table_cells([on("/a"), on("/b"), on("/c", samples=500), on("/d", classes=2),
                                   on("/e", workers=(8,)), _run("torch-ddp", 10, "/f"), on("/g", epochs=3),
                                   on("/h", epochs=3, target_accuracy=0.9)])
    assert len(chosen) == 7 and [len(v) for v in repeats.values() if v] == [1]
    assert {k.source for k in chosen} == {
        "imagefolder via torch, 10 classes x 1,797 samples, 2 workers, 3 epoch(s)",
        "imagefolder via torch, 10 classes x 1,797 samples, 2 workers, 3 epoch(s) to top-1 0.9",
        "synthetic", "imagefolder via torch, 10 classes x 1,797 samples, 2 workers",
        "imagefolder via torch, 10 classes x 500 samples, 2 workers",
        "imagefolder via torch, 2 classes x 1,797 samples, 2 workers",
        "imagefolder via torch, 10 classes x 1,797 samples, 8 workers"}


def test_runs_that_differ_only_in_horovods_knobs_or_the_sparse_exchange_are_different_cells():
    """A knob study in one folder (--fusion-threshold, --cycle-time, --nccl-streams, whatever set them: the values
    the ranks recorded) is one cell per setting; Horovod's defaults, set or not, are one cell; sparse embeddings
    (and as dense) and tf-native ps's server count are settings of their own too."""
    def hvd(created, **knobs):
        run = _run("torch-horovod", 10, created)
        run.environment.distribution = {"library": "horovod", "fusion_threshold": 128 * 2**20, "cycle_time": 1.0,
                                        "nccl_streams": 1, **knobs}
        return run

    chosen, repeats = table_cells([hvd("1"), hvd("2", knobs_set=["fusion_threshold"]), hvd("3", fusion_threshold=2**25),
                                   hvd("4", cycle_time=2.0), hvd("5", nccl_streams=2), hvd("6", fusion_threshold=0),
                                   _run("torch-horovod", 10, "7", sparse_embeddings=True),
                                   _run("torch-horovod", 10, "8", sparse_embeddings=True, sparse_as_dense=True)])
    assert sorted(k.exchange for k in chosen) == ["", "2 NCCL streams", "cycle 2 ms", "fusion 32 MiB", "no fusion",
                                                  "sparse embeddings", "sparse embeddings as dense"]
    assert [len(v) for v in repeats.values() if v] == [1]  # the defaults, whether set or not: one cell, repeated
    assert "fusion 32 MiB" in next(k for k in chosen if k.exchange == "fusion 32 MiB").setting_text()
    ps = [_run("tf-native", 10, str(i), strategy="ps", num_ps=n) for i, n in enumerate((1, 2))]
    assert sorted(k.exchange for k in table_cells(ps)[0]) == ["", "2 parameter servers"]


def test_every_run_option_is_either_in_a_cells_key_or_said_why_not():
    """A new run option must be placed: held by the key (KEYED names where) or a repeat's difference (UNKEYED says
    why), never forgotten, which would merge runs of two settings as repeats of one."""
    import dataclasses

    from bench.config import RunConfig
    from bench.records.collect import KEYED, UNKEYED, Key

    fields = {f.name for f in dataclasses.fields(RunConfig)}
    assert set(KEYED) | set(UNKEYED) == fields and not set(KEYED) & set(UNKEYED), (
        fields - set(KEYED) - set(UNKEYED), set(KEYED) & set(UNKEYED))
    assert set(KEYED.values()) <= {f.name for f in dataclasses.fields(Key)}


def test_a_difference_is_significant_only_from_repeated_runs():
    """Numbers issue, finding 8: two launches' within-run intervals leave out run-to-run variance; the call
    needs two or more runs a side and non-overlapping between-run intervals."""
    from bench.records.collect import significant

    a = [_run("torch-ddp", v, str(i)) for i, v in enumerate([100.0, 101.0, 99.0])]
    b = [_run("torch-horovod", v, str(i)) for i, v in enumerate([120.0, 121.0, 119.0])]
    noisy = [_run("torch-horovod", v, str(i)) for i, v in enumerate([90.0, 130.0, 110.0])]
    assert significant(a, b) is True and significant(a, noisy) is False
    assert significant(a[:1], b[:1]) is None and significant(a, b[:1]) is None


def test_the_report_and_the_docs_define_every_figure_as_the_registry_does(tmp_path):
    """The report's first sentence and docs/results.md's table take each figure's definition from
    bench/records/metrics.py: the headline is every timed sample over the slowest rank's time (schema 3), not a
    mean of window rates."""
    from bench.records.metrics import METRICS

    headline = METRICS["samples_per_sec_total"].definition
    assert "slowest rank's total time" in headline and "mean" not in headline
    first = write_report([A], tmp_path).read_text().split("\n\n")[1]
    assert f"Throughput T (img/s) is {headline}." in first and "Per rank = T / n." in first
    docs = (ROOT / "docs" / "results.md").read_text()
    for m in METRICS.values():
        assert f"| `{m.section}.{m.key}` | {m.label} | {m.unit.replace('{s}', 'sample')} | {m.definition} |" in docs


def test_tables_say_per_gpu_for_gpu_runs_and_per_rank_for_cpu_runs(tmp_path):
    from rich.console import Console

    from bench.records.results import render_table

    cpu = load_results([A])[0]
    gpu = cpu.model_copy(deep=True)
    gpu.config.device = "cuda"

    def text(result):
        console = Console(width=200, record=True, file=open(tmp_path / "t.txt", "w"))  # noqa: SIM115
        console.print(render_table(result))
        return console.export_text()
    assert "throughput, per rank" in text(cpu) and "per GPU" not in text(cpu)
    assert "throughput, per GPU" in text(gpu) and "per rank" not in text(gpu)
    report = write_report([A], tmp_path).read_text()
    assert "img/s per rank" in report and "per GPU" not in report and "1 rank, n ranks" in report


def _ticks_and_bars(fig):
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    ax = fig.axes[0]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    legend = ax.get_legend()
    found = {"ticks": [t.get_text() for t in ax.get_xticklabels()], "xlabel": ax.get_xlabel(),
             "bars": [[round(float(abs(seg[1][1] - seg[0][1])), 6) for seg in c.lines[2][0].get_segments()]
                      for c in bars],
             "labels": [t.get_text() for t in legend.get_texts()], "title": legend.get_title().get_text()}
    plt.close(fig)
    return found


def test_the_scaling_plots_tick_at_the_measured_sizes_and_draw_their_intervals():
    """speedup.png and efficiency.png: integer ticks at the world sizes measured (1 and 2, not 1.0, 1.2, ...), a
    bar on every point, the within-run interval where a cell ran once and the between-run one where it was
    repeated (the legend's title says which), the axis in the runs' devices, the ideal line labelled."""
    from bench.commands.report import scaling_figure, scaling_series

    results = load_results([A])
    chosen, repeats = table_cells(results)
    series = scaling_series(scaling_rows(chosen, repeats))
    for metric, ideal in (("speedup", "ideal: S_n = n"), ("efficiency", "ideal: E_n = 1")):
        drawn = _ticks_and_bars(scaling_figure(series, metric, "rank"))
        assert drawn["ticks"] == ["1", "2"] and drawn["xlabel"] == "ranks on the CPU (n)"
        # a bar where the row has an interval (none at n = 1: the base against itself), of the row's length
        scale = (lambda r: 1.0) if metric == "speedup" else (lambda r: 1.0 / r.n)
        assert drawn["bars"] == [[round((r.speedup_high - r.speedup_low) * scale(r), 6)
                                  if r.speedup_low is not None else 0.0 for r in rs] for rs in series.values()]
        assert sum(length > 0 for bars in drawn["bars"] for length in bars) == 1  # torch-ddp at 2: both ran
        assert ideal in drawn["labels"] and "within run" in drawn["title"]
    assert _ticks_and_bars(scaling_figure(series, "speedup", "GPU"))["xlabel"] == "GPUs (n)"

    # the same cells run twice more: the bars are between runs now, and the table shows that interval too
    again = []
    for i, r in enumerate(results * 2):
        r = r.model_copy(deep=True)
        r.created_utc = f"2000-01-0{1 + i // len(results)}T00:00:00Z"  # older than the originals
        r.summary.samples_per_sec_total *= 0.97 + 0.02 * i / len(results)
        again.append(r)
    chosen, repeats = table_cells(results + again)
    rows = scaling_rows(chosen, repeats)
    assert all(r.between_runs == 3 and r.interval_kind == "between 3 runs" for r in rows)
    assert all(r.speedup_low <= r.speedup_high for r in rows if r.speedup is not None)
    drawn = _ticks_and_bars(scaling_figure(scaling_series(rows), "speedup", "rank"))
    assert "between runs" in drawn["title"] and "within" not in drawn["title"]


def test_compare_calls_a_change_undecided_where_its_runs_cannot_tell():
    """Overlapping between-run intervals do not show that there is no difference: 'undecided', as with one run
    a side; 'yes' only where they do not overlap."""
    from bench.commands.compare import Change, significance

    def row(significant, runs):
        return Change("cell", "samples_per_sec_total", 1.0, 1.1, 0.1, -0.1, significant=significant, runs=runs)

    assert significance(row(True, (3, 3))) == "yes"
    assert significance(row(False, (3, 2))) == "undecided: between-run intervals overlap (3 vs 2 runs)"
    assert significance(row(None, (1, 1))) == "undecided: 1 vs 1 runs; needs 2+ each"
    assert significance(row(None, None)) == "n/a"


def test_an_interval_unbounded_above_keeps_its_lower_bound_in_the_tables(tmp_path):
    from rich.console import Console

    from bench.records.results import render_table

    folder = tmp_path / "runs"
    shutil.copytree(A, folder)
    path = next(p for p in sorted(folder.glob("*.json")) if "torch-single" in p.name)
    result = json.loads(path.read_text())
    assert result["world_size"] == 1 and result["schema_version"] < 3  # read as schema 3: upgraded from windows
    result["samples"]["window_s"] = [[1.0, 9.0]]  # two very uneven windows: the time's interval reaches 0
    path.write_text(json.dumps(result))
    low = load_results([path])[0].summary.ci95[0]
    assert f"| {low:.2f}–∞ |" in write_report([folder], tmp_path / "out").read_text()
    console = Console(width=200, record=True, file=open(tmp_path / "t.txt", "w"))  # noqa: SIM115
    console.print(render_table(load_results([path])[0]))
    assert f"{low:.2f} .. n/a" in console.export_text()


def test_paper_and_tuned_runs_are_their_own_cells_and_are_put_side_by_side():
    """--tuned beside the paper's profile: a compiled, fused run is another cell than the eager one (never a repeat),
    the report pairs the two of one mode, model, precision and n, and compare pairs a paper folder's cell with a
    tuned folder's, naming what A ran with."""
    from bench.commands.compare import _pairs, differences
    from bench.commands.report import paper_and_tuned, paper_and_tuned_section, scaling_rows

    paper = _run("torch-ddp", 100.0, "1", profile="cpu-quick", num_classes=1000)
    tuned = _run("torch-ddp", 130.0, "2", profile="cpu-tuned", batch_size=8, channels_last=True, compile="default",
                 fused_optimizer=True, num_classes=1000)
    for r in (paper, tuned):
        r.summary.samples_per_sec_per_gpu = r.summary.samples_per_sec_total / 2
        r.run_id = r.created_utc
    tuned.timing.compile_s = 21.5
    chosen, repeats = table_cells([paper, tuned])
    assert len(chosen) == 2 and not any(repeats.values())
    rows = scaling_rows(chosen, repeats)
    assert {r.extras for r in rows} == {"", "channels-last, compiled (default), fused optimizer"}
    ((a, b),) = paper_and_tuned(rows)
    assert (a.profile, b.profile) == ("cpu-quick", "cpu-tuned")
    section = "\n".join(paper_and_tuned_section(rows, "img", "rank"))
    assert ("| torch-ddp | resnet50 32x32 fp32 | 2 | b2 | 50.00 | b8, channels-last, compiled (default), fused "
            "optimizer | 65.00 | 1.30 | 21.5 |") in section
    side_a, _ = table_cells([paper])
    side_b, _ = table_cells([tuned])
    ((ka, kb),) = _pairs(side_a, side_b)
    assert differences(ka, kb) == "batch 2, NCHW, eager, plain optimizer"
    assert _pairs(side_a, side_a) == [(ka, ka)]


def test_the_reports_environment_says_the_cores_a_run_could_use_where_fewer_than_the_hosts():
    from bench.commands.report import environment_text

    def on(**environment):
        return samples.result(environment={"cpu": "EPYC", "cpu_count": 64, **environment})

    assert "- CPU: EPYC (64 cores, 8 the run could use)" in environment_text([on(usable_cores=8)])
    assert "- CPU: EPYC (64 cores)" in environment_text([on(usable_cores=64)])
    older = on()
    assert "usable_cores" not in older.environment.model_fields_set  # a record from before the field
    assert "- CPU: EPYC (64 cores)" in environment_text([older])


def attributed(result, hosts, compute_s):
    """A copy of ``result`` run on ``hosts`` (one rank each) with per-rank attribution of those compute times."""
    out = result.model_dump(mode="json", by_alias=True, exclude_unset=True)  # as written
    for rank, host in zip(out["environment"]["ranks"], hosts, strict=True):
        rank["host"] = host
    step = 1 / out["summary"]["samples_per_sec_total"]
    out["attribution"] = {
        "measured": True, "unit": "s", "steps": 2, "straggler": None, "straggler_threshold": 0.3,
        "hidden_share_median": None, "exposed_s_median": 0.0, "cost_s": 1.0, "definitions": {},
        "per_rank": [{"rank": i, "host": h, "device": "cpu", "compute_s": c, "exchange_s": 0.01, "step_s": step,
                      "exposed_s": 0.0, "hidden_share": None, "compute_step_s": [c], "exchange_step_s": [0.01]}
                     for i, (h, c) in enumerate(zip(hosts, compute_s, strict=True))]}
    return out


def rules_file(path, *rules):
    path.write_text("\n".join("[[rule]]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in r.items())
                              for r in rules))
    return path


def test_compare_applies_a_rule_file(tmp_path):
    """Job rules against A's same cell flag exactly the cells whose throughput fell below the bound (computed here from
    the results), and name no node; a rank rule rejects the node of the rank it flags and accepts the other; rules
    with no figure in training results are named as not applied."""
    from bench.commands.compare import apply_rules, matched
    from bench.commands.diagnose import rules as rules_mod

    cells = matched(A, B)
    ratios = {c.label: c.b.summary.samples_per_sec_total / c.a.summary.samples_per_sec_total
              for c in cells}
    tolerance = 1 - sorted(ratios.values())[len(ratios) // 2]  # the median cell's drop: some flagged, some not
    path = rules_file(tmp_path / "job.toml", {"name": "job-floor", "kind": "job", "figure": "samples_per_sec",
                                              "against": "baseline", "direction": "below", "tolerance": tolerance,
                                              "severity": "error"},
                      {"name": "pair-slow", "kind": "pair", "figure": "busbw_GBps", "against": "peers",
                       "direction": "below", "tolerance": 0.4, "severity": "error"})
    verdict = apply_rules(rules_mod.load(path), cells)
    assert {f.cell for f in verdict.findings} == {c for c, r in ratios.items() if r < 1 - tolerance}
    assert 0 < verdict.errors < len(cells)
    assert [a.model_dump() for a in verdict.accept] == [{"node": "vm", "accepted": True, "errors": [], "warnings": []}]
    assert verdict.unused == ["pair-slow"]

    ddp = {r.world_size: r for r in load_results([A]) if r.mode == "torch-ddp"}[2]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "r.json").write_text(json.dumps(attributed(ddp, ["n1", "n2"], [0.10, 0.10])))
    (tmp_path / "b" / "r.json").write_text(json.dumps(attributed(ddp, ["n1", "n2"], [0.10, 0.13])))
    path = rules_file(tmp_path / "rank.toml", {"name": "rank-slower", "kind": "rank", "figure": "compute_s",
                                               "against": "baseline", "direction": "above", "tolerance": 0.2,
                                               "severity": "error"},
                      {"name": "rank-ceiling", "kind": "rank", "figure": "compute_s", "against": "value",
                       "direction": "above", "value": 0.12, "severity": "warning"})
    verdict = apply_rules(rules_mod.load(path), matched(tmp_path / "a", tmp_path / "b"))
    assert [(f.where, f.rule.split(":")[0]) for f in verdict.findings] == [
        ("rank 1 (n2)", "rank-slower"), ("rank 1 (n2)", "rank-ceiling")]
    assert [a.model_dump() for a in verdict.accept] == [{"node": "n1", "accepted": True, "errors": [], "warnings": []},
                                                        {"node": "n2", "accepted": False, "errors": ["rank-slower"],
                                                         "warnings": ["rank-ceiling"]}]
    assert verdict.unused == []


def test_compare_rules_on_the_command_line(tmp_path, cli):
    """An error finding: the tables, then one line and exit 1; no finding: exit 0; a bad rule file: one line before
    any table."""
    rule = {"name": "job-floor", "kind": "job", "figure": "samples_per_sec", "against": "value",
            "direction": "below", "severity": "error"}
    r = cli("compare", str(A), str(B), "--rules", str(rules_file(tmp_path / "high.toml", {**rule, "value": 1e9})))
    assert r.returncode == 1 and "error finding(s) under the rules" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "accept" in r.stdout and "job-floor" in r.stdout and "the job as a whole failed" in r.stdout
    r = cli("compare", str(A), str(B), "--rules", str(rules_file(tmp_path / "low.toml", {**rule, "value": 1e-9})))
    assert r.returncode == 0 and "no findings" in r.stdout, r.stderr
    r = cli("compare", str(A), str(B), "--rules", "default")
    assert "not applied" in r.stdout and "device-slower-than-peers" in r.stdout  # no device figures in a training run
    # job-slower-than-baseline (tolerance 0.25): fails exactly when a cell of B fell below 0.75 x A's, computed here
    from bench.commands.compare import matched

    slower = [c.label for c in matched(A, B)
              if c.b.summary.samples_per_sec_total < 0.75 * c.a.summary.samples_per_sec_total]
    assert r.returncode == (1 if slower else 0), (slower, r.stdout[-2000:])
    assert ("failed: job-slower-than-baseline" in r.stdout) == bool(slower)
    r = cli("compare", str(A), str(B), "--rules", str(rules_file(tmp_path / "bad.toml", {**rule, "value": "x"})))
    assert r.returncode == 1 and "value must be a number" in r.stderr and "->" not in r.stdout


def test_compare_checks_hold_b_only_against_a_baseline_never_against_a_pair_of_other_settings(tmp_path, cli):
    """--max-regression and --rules judge a cell of B against A's same settings: a tuned run 40% below the paper's,
    or a --data run below the synthetic one, is what the difference costs, shown in the table and named as not
    checked, never a regression; with only such pairs the check has nothing to hold and says so (exit 1)."""
    def write(folder, *runs):
        folder.mkdir()
        for i, r in enumerate(runs):
            (folder / f"r{i}.json").write_text(json.dumps(r.model_dump(mode="json", by_alias=True, exclude_unset=True)))
        return str(folder)

    same_a, same_b = _run("torch-single", 50.0, "1"), _run("torch-single", 49.0, "2")
    paper = _run("torch-ddp", 100.0, "1", profile="cpu-quick")
    tuned = _run("torch-ddp", 60.0, "2", profile="cpu-tuned", batch_size=8, channels_last=True, compile="default")
    a, b = write(tmp_path / "a", same_a, paper), write(tmp_path / "b", same_b, tuned)
    from bench.commands.compare import compare

    headline = {r.cell.split()[0]: r for r in compare(Path(a), Path(b)) if r.metric == "samples_per_sec_total"}
    assert (headline["torch-ddp"].loose, round(headline["torch-ddp"].change, 3)) == (True, -0.4)  # the pair is shown
    assert (headline["torch-single"].loose, round(headline["torch-single"].change, 3)) == (False, -0.02)
    r = cli("compare", a, b, "--max-regression", "5")
    assert r.returncode == 0, r.stderr  # the torch-single cell fell 2%; the pair is not a regression
    assert "not held to --max-regression (different settings, not a baseline): torch-ddp" in r.stdout
    rule = {"name": "job-floor", "kind": "job", "figure": "samples_per_sec", "against": "baseline",
            "direction": "below", "tolerance": 0.1, "severity": "error"}
    r = cli("compare", a, b, "--rules", str(rules_file(tmp_path / "r.toml", rule)))
    assert r.returncode == 0 and "no findings" in r.stdout, r.stdout
    assert "not held to --rules" in r.stdout
    r = cli("compare", a, write(tmp_path / "b2", _run("torch-single", 40.0, "2"), tuned), "--max-regression", "5")
    assert r.returncode == 1 and "regressed by 20.0% in torch-single" in r.stderr  # a baseline's drop still fails

    only_pairs = write(tmp_path / "p", paper), write(tmp_path / "t", tuned)
    r = cli("compare", *only_pairs, "--max-regression", "5")
    assert r.returncode == 1 and "share no cell of the same settings" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = cli("compare", *only_pairs)
    assert r.returncode == 0  # without a check, the pair alone is a comparison


def test_the_html_page_shows_raw_html_in_the_report_as_text(tmp_path):
    """Any string a report holds (a dataset path, a host name, a skipped file's reason) can hold HTML: the page
    shows it as text and runs nothing (markdown-it's commonmark preset passes raw HTML through unless told not to).
    The Markdown around it still renders: the heading, the table, the emphasis."""
    from bench.commands.report import html_page

    markdown = ("# Report\n\nskipped `x.json`: <script>alert(1)</script> in *bad* <img src=x onerror=alert(2)>\n\n"
                "| host | img/s |\n|---|---|\n| <b>node1</b> | 12.5 |\n")
    page = html_page(markdown, tmp_path)
    assert "<script>alert" not in page and "<img src=x" not in page and "<b>node1" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;b&gt;node1&lt;/b&gt;" in page
    assert "<h1>Report</h1>" in page and "<table>" in page and "<em>bad</em>" in page


def test_results_written_before_the_trackers_report_the_tables_they_did(tmp_path):
    """The schema-1 sweeps and the schema-3 results of a --data run with attribution (tests/fixtures/schema3, written
    at adc8d93, before each measurement became a tracker) give exactly the table rows bench report wrote for them then
    (tests/fixtures/report-tables-adc8d93.md), alone and beside a result of today's with a plugin's section
    (tests/fixtures/trackers: another cell, batch 8)."""
    before = [line for line in (FIXTURES / "report-tables-adc8d93.md").read_text().splitlines()
              if line.startswith("|")]
    old = [A, B, FIXTURES / "schema3"]
    alone = write_report(old, tmp_path / "alone").read_text().splitlines()
    assert [line for line in alone if line.startswith("|")] == before
    mixed = write_report([*old, FIXTURES / "trackers"], tmp_path / "mixed").read_text().splitlines()
    assert all(line in mixed for line in before)
    assert any("| torch-ddp | resnet20 32x32 b8 fp32" in line for line in mixed)  # the new result is read too
    new = load_results([FIXTURES / "trackers"])[0]
    assert new.measurements["context_switches"]["per_rank"][1]["rank"] == 1  # kept by name, without the plugin


def test_the_report_says_what_each_run_warned_of_beside_its_figures(tmp_path):
    """A run's warnings go to its standard error, which a report's reader never saw: the report lists them under the
    scaling table (here the busy host of tests/fixtures/trackers: other processes kept 1.0 of its 2 cores busy), and
    says nothing where no run warned (the sweeps of tests/fixtures/sweep-a)."""
    text = write_report([A, FIXTURES / "trackers"], tmp_path / "both").read_text()
    heading = "What the runs warned of (their figures may not mean what the table says):"
    assert heading in text
    warned = text.split(heading, 1)[1].lstrip().split("\n\n", 1)[0].splitlines()
    assert len(warned) == 1 and warned[0].startswith("- torch-ddp, resnet20 32x32, batch 8/device, fp32, cpu")
    assert warned[0].endswith(", n = 2 (20261207T182913Z-torch-ddp-108c5abf): other processes kept 1.0 of vm's 2 "
                              "cores busy while the windows ran; these figures are that busy node's, not an idle "
                              "one's (docs/running.md: a busy node)")
    assert text.index(heading) < text.index("## Horovod vs native")
    assert heading not in write_report([A], tmp_path / "quiet").read_text()


def test_compare_says_what_either_sides_run_warned_of(tmp_path, cli):
    """A change between A and B may be a busy host's, not the code's: compare prints each side's warnings per cell
    (tests/fixtures/trackers ran with 1.0 of 2 cores taken), and none for runs that gave none (sweep-a, sweep-b)."""
    b = tmp_path / "b"
    shutil.copytree(FIXTURES / "trackers", b)
    r = cli("compare", str(FIXTURES / "trackers"), str(b))
    assert r.returncode == 0, r.stderr
    warned = [line for line in r.stdout.splitlines() if " warned in " in line]
    assert [line.split(" warned in ")[0] for line in warned] == ["A", "B"]
    assert all(line.endswith("n=2: other processes kept 1.0 of vm's 2 cores busy while the windows ran; these "
                             "figures are that busy node's, not an idle one's (docs/running.md: a busy node)")
               for line in warned), warned
    assert " warned in " not in cli("compare", str(A), str(B)).stdout
