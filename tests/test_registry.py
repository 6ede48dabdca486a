"""A new mode and a new model, registered from a plugin and nowhere else, reach every command.

tests/plugins/toy_plugin.py registers ``torch-toy`` (a distributed PyTorch mode), ``toy-mlp`` (a model
in both frameworks) and ``--toy-lr-scale`` (a run option). With HVDBENCH_PLUGINS naming it, bench, sweep,
report, verify and predict all see them: no other file knows they exist.
"""

import json
from pathlib import Path

import pytest
from conftest import bench, only_result

PLUGIN_DIR = str(Path(__file__).parent / "plugins")
TOY = {"HVDBENCH_PLUGINS": "toy_plugin", "PYTHONPATH": PLUGIN_DIR}
SMALL = ["--image-size", "8", "--batch-size", "4", "--num-classes", "5", "--warmup-steps", "1",
         "--steps-per-window", "2", "--windows", "2"]


def toy(*args: str, timeout: float = 300, **env: str):
    return bench(*args, timeout=timeout, **TOY, **env)


@pytest.mark.multiproc
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


@pytest.mark.multiproc
def test_a_plugin_that_is_missing_is_one_clear_line():
    out = bench("models", HVDBENCH_PLUGINS="no_such_plugin")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "error: HVDBENCH_PLUGINS: cannot import plugin 'no_such_plugin' (No module named 'no_such_plugin')"]


@pytest.mark.multiproc
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


@pytest.mark.multiproc
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


@pytest.mark.multiproc
def test_verify_checks_the_new_mode_on_the_new_model(tmp_path):
    out = toy("verify", "--framework", "torch", "--modes", "torch-toy", "--model", "toy-mlp", "--image-size", "8",
              "--output", str(tmp_path), timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(next(tmp_path.glob("*verify*.json")).read_text())
    assert [(m["mode"], m["status"]) for m in report["modes"]] == [("torch-toy", "PASS")]


@pytest.mark.multiproc
def test_predict_prices_the_new_models_gradient():
    # 1,700,064 parameters at 100000 classes (3 x 16 + 16, then 17 per class): 6.8 MB of fp32 gradient.
    out = toy("predict", "--model", "toy-mlp", "--num-classes", "100000", "--step-time", "0.01", "--busbw", "1",
              "--gpus", "1,2")
    assert out.returncode == 0, out.stderr
    assert "G 6.8 MB" in out.stdout


def test_the_mode_facts_come_from_the_spec():
    """What report, verify, sweep and predict ask a mode, answered by its ModeSpec."""
    from bench.modes import MODES, single_of, variant, variants

    assert variant("tf-native").label == "tf-native:multiworker"  # the default strategy
    assert variant("tf-native:ps").verify_np == 1 and variant("tf-native:mirrored").verify_np is None
    assert variant("torch-horovod").allreduce == "horovod-torch" and variant("tf-native:ps").allreduce is None
    assert MODES["tf-horovod"].peer == "tf-native" and MODES["tf-horovod"].needs_mpi
    assert single_of("torch").name == "torch-single"
    assert [v.label for v in variants("tensorflow", distributed=True)] == [
        "tf-horovod", "tf-native:multiworker", "tf-native:mirrored", "tf-native:ps"]


@pytest.mark.parametrize("command, cls", [("verify", "bench.commands.verify:VerifyConfig"),
                                          ("allreduce", "bench.commands.allreduce:AllreduceConfig"),
                                          ("diagnose", "bench.commands.diagnose:DiagnoseConfig")])
def test_a_commands_flags_are_its_configurations_declarations(command, cls):
    """Gate issue, item 3: verify, allreduce and diagnose restated their configurations field by field in the CLI
    (about 49 fields written twice, defaults included). Each command's flags now come from its configuration's
    declarations alone: the same names, and each shown default reads back as the field's default."""
    import dataclasses
    import importlib

    import typer.main

    from bench.cli import app
    from bench.config import declared

    module, _, name = cls.partition(":")
    config = getattr(importlib.import_module(module), name)
    click = typer.main.get_command(app).commands[command]
    params = {p.name: p for p in click.params}
    options = declared(config)
    assert set(params) == {n for n, *_ in options}
    for field_name, _, default, how in options:
        shown = params[field_name].default
        assert (how.parse(shown) if how.parse and isinstance(shown, str) else shown) == default, field_name
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    assert all(defaults[n] == d for n, _, d, _ in options)
