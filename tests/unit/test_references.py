"""Reference figures (bench.records.references): which one a result matches, and what the run's table and the
report say about it ("is my number good?")."""

import json
import shutil

import pytest

from bench.data.feed import Input
from bench.errors import BenchError
from bench.records import references
from bench.records.collect import load_results
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


@pytest.mark.parametrize("change, why", [
    # another card of the same name: not the SXM one measured; Lambda's PCIe figures are at their own batch
    ({"gpu": "NVIDIA H100 PCIe"}, "of the NVIDIA H100 PCIe; the nearest, 1,866/s per GPU, torch resnet50 amp-fp16 "
                                  "batch 1280 on one GPU, H100 PCIe (Lambda, published, 2023), differs in precision "
                                  "amp-bf16 (amp-fp16), batch 64 (1280)"),
    ({"gpu": "NVIDIA H100 80GB HBM3 MIG 1g.10gb"}, "none of the NVIDIA H100 80GB HBM3 MIG 1g.10gb: no reference was "
                                                   "measured on it"),  # a seventh of the SXM card
    ({"gpu": "NVIDIA H200 NVL"}, "none of the NVIDIA H200 NVL"),  # the PCIe card, not the H200 SXM the figures are of
    ({"world": 8}, "differs in GPUs 8 (1)"),  # eight GPUs against a one-GPU figure: the share would hold scaling
    ({"gpu": "NVIDIA A100-SXM4-80GB"}, "of the NVIDIA A100-SXM4-80GB; the nearest, 1,582/s per GPU, torch resnet50 "
                                       "amp-fp16 batch 1280 on one GPU"),
    ({"channels_last": True}, "differs in layout NHWC (NCHW)"),  # H100: no channels-last figure
    ({"compile": "default"}, "differs in tuning compiled (default) (eager)"),  # not the eager reference
    ({"batch_size": 128}, "differs in batch 128 (64)"),
    ({"mode": "tf-horovod"}, "differs in mode tf-horovod (torch-ddp)"),  # no TensorFlow figure of the GPU
])
def test_where_no_reference_matches_one_line_says_which_there_are_and_how_the_nearest_differs(tmp_path, change,
                                                                                             why):
    run = gpu_run(tmp_path, **change)
    assert references.match(run, []) is None and references.standing(run, []) is None
    line = references.unmatched(run, [])
    assert why in line and "\n" not in line, line
    assert references.unmatched(gpu_run(tmp_path), []) is None  # matched: nothing more to say


def test_the_published_figures_of_more_gpus_match_their_own_batch_precision_and_world_size(tmp_path):
    """Lambda's 2023 ResNet-50 rows (their CSVs: the node's total over its GPUs, at their batch per GPU)."""
    for gpu, world, precision, batch, rate in (("NVIDIA A100-SXM4-80GB", 1, "amp-fp16", 1280, 1582.0),
                                               ("NVIDIA A100-SXM4-80GB", 8, "amp-fp16", 1280, 1429.9),
                                               ("NVIDIA A100-SXM4-80GB", 8, "fp32", 640, 924.6),
                                               ("NVIDIA A100 80GB PCIe", 2, "fp32", 640, 978.5),
                                               ("NVIDIA A100-PCIE-40GB", 1, "amp-fp16", 720, 1396.0),
                                               ("NVIDIA H100 PCIe", 8, "amp-fp16", 1280, 1839.1)):
        ref = references.match(gpu_run(tmp_path, gpu=gpu, world=world, mode="torch-ddp", precision=precision,
                                       batch_size=batch), [])
        assert ref is not None and (ref.per_device, ref.world_size, ref.source) == (rate, world,
                                                                                     "Lambda, published"), gpu
    # the 40 GB card's figures are not the 80 GB card's, nor the SXM card's the PCIe card's
    assert references.match(gpu_run(tmp_path, gpu="NVIDIA A100-PCIE-40GB", precision="amp-fp16",
                                     batch_size=1280), []) is None
    assert references.match(gpu_run(tmp_path, gpu="NVIDIA A100 80GB PCIe", precision="amp-fp16", batch_size=1280),
                            []).per_device == 1527.0


def test_nvidias_tensorflow_figures_are_named_as_the_nearest_since_they_read_imagenet(tmp_path):
    """NVIDIA's TensorFlow ResNet-50 v1.5 on a DGX A100 40GB (DeepLearningExamples' table: 1 GPU AMP 2375 img/s,
    8 GPUs TF32 7000): a synthetic tf-horovod run of their settings matches none, and the line says why."""
    for world, precision, rate in ((1, "amp-fp16", "2,375"), (8, "fp32", "875")):
        run = gpu_run(tmp_path, gpu="NVIDIA A100-SXM4-40GB", mode="tf-horovod", world=world, precision=precision,
                      batch_size=256, xla=True)
        assert references.match(run, []) is None
        line = references.unmatched(run, [])
        assert f"the nearest, {rate}/s per GPU, tensorflow resnet50 {precision} batch 256, XLA, ImageNet TFRecords" \
               in line and line.endswith("differs in data synthetic (ImageNet TFRecords)"), line
    # a torch run on that card is told the same figures are another framework's
    line = references.unmatched(gpu_run(tmp_path, gpu="NVIDIA A100-SXM4-40GB", precision="amp-fp16",
                                        batch_size=256, xla=True), [])
    assert "differs in mode torch (tensorflow)" in line, line


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
    other = gpu_run(tmp_path, batch_size=128)  # no reference matches: the table says which there are
    console = Console(width=250, record=True, file=open(tmp_path / "u.txt", "w"))  # noqa: SIM115
    console.print(render_table(other))
    text = console.export_text()
    assert "vs reference" in text and "none matches:" in text and "differs in batch 128 (64)" in text
    cpu = write_report([FIXTURES / "sweep-a"], tmp_path / "cpu").read_text()
    assert "## Against the references" not in cpu  # nothing matches a CPU run: nothing is said
