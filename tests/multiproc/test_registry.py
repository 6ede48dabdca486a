"""A new mode, model, run option, data format and loader, registered from a plugin and nowhere else, reach every
command.

tests/plugins/toy_plugin.py registers ``torch-toy`` (a distributed PyTorch mode), ``toy-mlp`` (a model
in both frameworks) and ``--toy-lr-scale`` (a run option). With HVDBENCH_PLUGINS naming it, bench, sweep,
report, verify and predict all see them: no other file knows they exist. tests/plugins/toy_data.py registers the
``npz`` data format and the ``plain`` loader: bench data make writes it, runs and bench data bench read it;
tests/plugins/toy_collective.py the ``broadcast`` collective, which bench allreduce measures;
tests/plugins/toy_tracker.py the ``context_switches`` measurement, which every run then takes.
"""

import json

from tests.conftest import TESTS, bench, only_result

PLUGIN_DIR = str(TESTS / "plugins")
TOY = {"HVDBENCH_PLUGINS": "toy_plugin", "PYTHONPATH": PLUGIN_DIR}
DATA = {"HVDBENCH_PLUGINS": "toy_plugin,toy_data", "PYTHONPATH": PLUGIN_DIR}
SMALL = ["--image-size", "8", "--batch-size", "4", "--num-classes", "5", "--warmup-steps", "1",
         "--steps-per-window", "2", "--windows", "2"]


def toy(*args: str, timeout: float = 300, **env: str):
    return bench(*args, timeout=timeout, **TOY, **env)


def test_the_commands_list_the_plugins_mode_and_model():
    listing = toy("--help")
    assert listing.returncode == 0 and "torch-toy" in listing.stdout
    options = toy("torch-ddp", "--help", COLUMNS="200")  # the plugin's run option is every mode's
    assert options.returncode == 0 and "--toy-lr-scale" in options.stdout and "Throwaway" in options.stdout
    assert "--toy-lr-scale" not in bench("torch-ddp", "--help", COLUMNS="200").stdout
    bad = toy("torch-toy", "--toy-lr-scale", "0", "--output", "unused")  # its declared check, one line
    assert bad.returncode == 1 and bad.stderr.strip() == "error: --toy-lr-scale must be an integer >= 1 (got 0)"
    models = toy("models")
    assert models.returncode == 0 and "toy-mlp" in models.stdout
    assert "torch-toy" not in bench("--help").stdout  # nothing else registers it


def test_a_plugin_that_is_missing_is_one_clear_line():
    out = bench("models", HVDBENCH_PLUGINS="no_such_plugin")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "error: HVDBENCH_PLUGINS: cannot import plugin 'no_such_plugin' (No module named 'no_such_plugin')"]


def test_the_new_mode_trains_the_new_model(tmp_path):
    out = toy("torch-toy", "--model", "toy-mlp", "--np", "2", "--toy-lr-scale", "3", "--output", str(tmp_path), *SMALL)
    assert out.returncode == 0, out.stderr
    result = only_result(tmp_path)
    assert result["config"]["extra"] == {"toy_lr_scale": 3}  # the plugin's option, kept with the run
    assert result["mode"] == "torch-toy" and result["world_size"] == 2
    assert result["sync"]["ranks_in_sync"] and result["sync"]["params_changed"]
    assert result["workload"]["parameters"] == 3 * 16 + 16 + 16 * 5 + 5
    assert result["workload"]["unit"] == "image"
    assert result["workload"]["train_flops_per_sample"] > 0


def test_sweep_and_report_see_them(tmp_path):
    folder = tmp_path / "sweep"
    out = toy("sweep", "--modes", "torch-toy,torch-single", "--np", "1,2", "--models", "toy-mlp",
              "--image-size", "8", "--warmup-steps", "1", "--steps-per-window", "2", "--windows", "2",
              "--toy-lr-scale", "2", "--output", str(folder), timeout=600)
    assert out.returncode == 0, out.stderr
    manifest = json.loads((folder / "manifest.json").read_text())
    assert sorted(manifest["cells"]) == ["torch-single_np1_toy-mlp_fp32_bdefault",
                                         "torch-toy_np1_toy-mlp_fp32_bdefault", "torch-toy_np2_toy-mlp_fp32_bdefault"]
    assert all(c["status"] == "ok" for c in manifest["cells"].values())
    cell = json.loads((folder / "configs" / "torch-toy_np2_toy-mlp_fp32_bdefault.json").read_text())
    assert cell["mode"] == "torch-toy" and cell["model"] == "toy-mlp" and cell["np"] == 2  # JSON, not argv
    assert cell["extra"] == {"toy_lr_scale": 2}  # the plugin's run option reached every cell
    result = json.loads((folder / manifest["cells"]["torch-toy_np2_toy-mlp_fp32_bdefault"]["result"]).read_text())
    assert result["config"]["extra"] == {"toy_lr_scale": 2}
    assert toy("report", str(folder)).returncode == 0
    rows = (folder / "report.md").read_text()
    toy_row = next(line for line in rows.splitlines() if line.startswith("| torch-toy | toy-mlp") and "| 2 |" in line)
    assert "–" not in toy_row.split("|")[9]  # speedup vs torch-single: the spec's reference was found


def test_verify_checks_the_new_mode_on_the_new_model(tmp_path):
    out = toy("verify", "--framework", "torch", "--modes", "torch-toy", "--model", "toy-mlp", "--image-size", "8",
              "--output", str(tmp_path), timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(next(tmp_path.glob("*verify*.json")).read_text())
    assert [(m["mode"], m["status"]) for m in report["modes"]] == [("torch-toy", "PASS")]


def test_predict_prices_the_new_models_gradient():
    # 1,700,064 parameters at 100000 classes (3 x 16 + 16, then 17 per class): 6.8 MB of fp32 gradient.
    out = toy("predict", "--model", "toy-mlp", "--num-classes", "100000", "--step-time", "0.01", "--busbw", "1",
              "--gpus", "1,2")
    assert out.returncode == 0, out.stderr
    assert "G 6.8 MB" in out.stdout


def test_a_new_data_format_and_loader_are_one_file_each_way(tmp_path):
    """bench data make writes the plugin's format; a run reads it through the plugin's loader and through the torch
    loader (both read images held in memory), each recording the format, the loader and the samples; bench data
    bench measures the new loader; a loader that does not read it says so in one line, and without the plugin
    neither name exists."""
    data = tmp_path / "npz"
    made = bench("data", "make", str(data), "--format", "npz", "--images", "24", "--image-size", "16", "--classes",
                 "3", **DATA)
    assert made.returncode == 0, made.stderr
    assert sorted(p.name for p in data.iterdir()) == ["meta.json", "train.npz", "val.npz"]
    for name in ("plain", "torch"):
        out = bench("torch-single", "--model", "toy-mlp", "--data", str(data), "--loader", name, "--image-size", "16",
                    "--batch-size", "4", "--warmup-steps", "1", "--steps-per-window", "2", "--windows", "2",
                    "--output", str(tmp_path / name), **DATA)
        assert out.returncode == 0, out.stderr[-3000:]
        section = only_result(tmp_path / name)["input"]
        assert (section["format"], section["loader"], section["train_samples"], section["classes"]) == \
            ("npz", name, 19, 3)
    measured = bench("data", "bench", str(data), "--loaders", "plain", "--image-size", "16", "--batch-size", "4",
                     "--batches", "2", "--warmup", "1", "--repeats", "1", "--workers", "0", "--output",
                     str(tmp_path / "bench"), **DATA)
    assert measured.returncode == 0, measured.stderr[-3000:]
    record = json.loads(next((tmp_path / "bench").glob("*.json")).read_text())
    assert record["format"] == "npz" and [r["loader"] for r in record["rows"]] == ["plain"]
    assert record["rows"][0]["images_per_sec"] > 0
    refused = bench("data", "bench", str(data), "--loaders", "dali", **DATA)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        "error: the dali loader does not read npz datasets (arrays): --loaders torch,tf,plain"]
    unknown = bench("data", "make", str(tmp_path / "x"), "--format", "npz")
    assert unknown.returncode == 1
    assert "--format takes imagefolder, tfrecord, cifar, tokens (got 'npz')" in unknown.stderr


def test_a_new_collective_is_one_file(tmp_path):
    """tests/plugins/toy_collective.py registers ``broadcast``: bench allreduce measures it over two ranks, checks its
    result and applies its bus factor; a backend it names as lacking it is refused in one line; without the plugin
    the name does not exist."""
    plugin = {"HVDBENCH_PLUGINS": "toy_collective", "PYTHONPATH": PLUGIN_DIR}
    out = bench("allreduce", "--op", "broadcast", "--np", "2", "--min-bytes", "4K", "--max-bytes", "16K",
                "--models", "", "--warmup", "1", "--samples", "2", "--target-sample-s", "0.01", "--output",
                str(tmp_path), **plugin)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert result["config"]["op"] == "broadcast" and [r["bytes"] for r in result["rows"]] == [4096, 16384]
    assert all(r["correct"] and r["busbw_GBps"] == r["algbw_GBps"] > 0 for r in result["rows"])
    refused = bench("allreduce", "--op", "broadcast", "--backend", "tf", **plugin)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == ["error: --backend tf has no broadcast (choose another backend)"]
    unknown = bench("allreduce", "--op", "broadcast")
    assert unknown.returncode == 1 and "unknown --op 'broadcast'" in unknown.stderr


def test_a_new_measurement_is_one_file(tmp_path):
    """tests/plugins/toy_tracker.py registers a tracker (bench.measure.tracker): every rank of a run measures it at
    its points, its section lands in the result (kept by name: the Result model does not name it), its row in the
    run's table, and bench report reads it back; without the plugin the result still reads, and nothing shows it."""
    plugin = {"HVDBENCH_PLUGINS": "toy_tracker", "PYTHONPATH": PLUGIN_DIR}
    out = bench("torch-ddp", "--np", "2", "--model", "resnet20", "--output", str(tmp_path), *SMALL, COLUMNS="200",
                **plugin)
    assert out.returncode == 0, out.stderr
    result = only_result(tmp_path)
    section = result["measurements"]["context_switches"]
    assert [r["rank"] for r in section["per_rank"]] == [0, 1]
    assert all(r["voluntary_per_step"] >= 0 and r["involuntary_per_step"] >= 0 for r in section["per_rank"])
    assert section["involuntary_per_step_max"] == max(r["involuntary_per_step"] for r in section["per_rank"])
    row = next(line for line in out.stdout.splitlines() if "involuntary context switches" in line)
    assert f"{section['involuntary_per_step_max']:.1f}" in row
    assert bench("report", str(tmp_path), **plugin).returncode == 0
    report = (tmp_path / "report.md").read_text()
    assert "## Other measurements" in report
    line = next(x for x in report.splitlines() if "| involuntary context switches |" in x)
    assert line.startswith("| torch-ddp |") and f"| {section['involuntary_per_step_max']:.1f} |" in line
    plain = bench("report", str(tmp_path), "--output", str(tmp_path / "plain"))
    assert plain.returncode == 0, plain.stderr
    assert "## Other measurements" not in (tmp_path / "plain" / "report.md").read_text()
