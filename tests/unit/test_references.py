"""Reference figures (bench.records.references): which one a result matches, and what the run's table and the
report say about it ("is my number good?")."""

import json
import shutil

import pytest

from bench.errors import BenchError
from bench.records import references
from bench.records.collect import load_results
from bench.records.schema import Input
from tests.conftest import FIXTURES


def gpu_run(tmp_path, gpu="NVIDIA H100 80GB HBM3", mode="torch-ddp", world=1, **config):
    """A fixture result made a run of ``mode`` on ``world`` GPUs named ``gpu`` (ResNet-50, amp-bf16, batch 64,
    224 x 224), one rank each."""
    folder = tmp_path / "runs"
    folder.mkdir(exist_ok=True)
    source = next(p for p in sorted((FIXTURES / "sweep-a").glob("*.json")) if "torch-ddp" in p.name)
    result = json.loads(source.read_text())
    result["mode"] = mode
    result["config"].update({"mode": mode, "device": "cuda", "model": "resnet50", "precision": "amp-bf16",
                             "batch_size": 64, "image_size": 224, **config})
    result["environment"]["ranks"] = [{"rank": r, "local_rank": r, "host": "g1", "device": f"cuda:{r} {gpu}"}
                                      for r in range(world)]
    result["world_size"] = result["processes"] = world
    path = folder / f"{len(list(folder.iterdir()))}-{source.name}"
    path.write_text(json.dumps(result))
    return load_results([path])[0]


def test_a_run_is_held_against_the_reference_of_its_gpu_mode_model_precision_and_batch(tmp_path):
    run = gpu_run(tmp_path)
    share, ref = references.standing(run, [])
    assert (ref.gpu, ref.mode, ref.per_device) == ("H100 80GB HBM3", "torch-ddp", 1698.4)
    assert share == pytest.approx(run.summary.samples_per_sec_per_gpu / 1698.4)
    assert "hvdbench GPU check" in ref.label() and "1 run" in ref.label()
    # a published figure made with other code matches any mode of its framework, at its own batch
    lambda_ = references.match(gpu_run(tmp_path, mode="torch-single", precision="amp-fp16", batch_size=1280), [])
    assert (lambda_.per_device, lambda_.source) == (2791.0, "Lambda, published")
    assert references.match(gpu_run(tmp_path, gpu="NVIDIA H200"), []).per_device == 2116.0


@pytest.mark.parametrize("change", [
    {"gpu": "NVIDIA H100 PCIe"},  # another card of the same name: not the SXM one measured
    {"gpu": "NVIDIA H100 80GB HBM3 MIG 1g.10gb"},  # a slice of the SXM card: a seventh of it
    {"gpu": "NVIDIA H200 NVL"},  # the PCIe card, not the H200 SXM the figures were measured on
    {"world": 8},  # eight GPUs against a one-GPU figure: the share would hold the scaling too
    {"gpu": "NVIDIA A100-SXM4-80GB"},
    {"channels_last": True},  # H100: no channels-last figure
    {"compile": "default"},  # a compiled run is not the eager reference
    {"batch_size": 128},
    {"mode": "tf-horovod"},
])
def test_nothing_is_said_where_no_reference_matches(tmp_path, change):
    run = gpu_run(tmp_path, **change)
    assert references.match(run, []) is None and references.standing(run, []) is None


def test_a_cpu_run_or_a_run_on_files_has_no_reference(tmp_path):
    run = gpu_run(tmp_path)
    run.config.device = "cpu"
    assert references.match(run, []) is None
    run = gpu_run(tmp_path)
    run.input = Input(source="dataset", format="imagefolder", loader="torch", definition="d")
    assert references.match(run, []) is None


def test_the_users_references_come_first_and_a_bad_file_is_one_line(tmp_path, monkeypatch):
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps([{"gpu": "A100-SXM4-80GB", "model": "resnet50", "precision": "amp-bf16",
                                 "batch_size": 64, "per_device": 1200.0, "source": "our cluster", "date": "2026-10",
                                 "mode": "torch-ddp", "runs": 5}]))
    monkeypatch.setenv(references.USER_ENV, str(mine))
    run = gpu_run(tmp_path, gpu="NVIDIA A100-SXM4-80GB")
    share, ref = references.standing(run)
    assert ref.source == "our cluster" and "5 runs" in ref.label()
    mine.write_text('{"gpu": "A100"}')
    with pytest.raises(BenchError, match="HVDBENCH_REFERENCES=.*: not a list of references"):
        references.standing(run)


def test_the_runs_table_and_the_report_say_where_the_run_stands(tmp_path, monkeypatch):
    from rich.console import Console

    from bench.commands.report import write_report
    from bench.records.results import render_table

    monkeypatch.delenv(references.USER_ENV, raising=False)
    run = gpu_run(tmp_path)
    share = run.summary.samples_per_sec_per_gpu / 1698.4
    console = Console(width=250, record=True, file=open(tmp_path / "t.txt", "w"))  # noqa: SIM115
    console.print(render_table(run))
    text = console.export_text()
    assert "vs reference" in text and f"{100 * share:.0f}" in text and "1,698/s per GPU" in text
    shutil.copy(next((tmp_path / "runs").glob("*.json")), tmp_path / "runs" / "again.json")
    report = write_report([tmp_path / "runs"], tmp_path / "out").read_text()
    assert "## Against the references" in report and f"| {share:.0%} |" in report
    cpu = write_report([FIXTURES / "sweep-a"], tmp_path / "cpu").read_text()
    assert "## Against the references" not in cpu  # nothing matches a CPU run: nothing is said
