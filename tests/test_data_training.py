"""Training from a dataset (--data): the run options' checks in one line, the input section's formulas, bench
compare's input cost, and real runs of both frameworks' pipelines (one shared run per framework)."""

import shutil

import pytest
from conftest import bench, only_result

from bench.config import RunConfig
from bench.data import feed
from bench.data.make import MakeConfig, make
from bench.errors import BenchError


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    """A small ImageNet-layout dataset, made once for this file: 40 training JPEGs of 4 classes."""
    root = tmp_path_factory.mktemp("data") / "jpegs"
    make(MakeConfig(path=str(root), images=50, classes=4, image_size=48))
    return root


@pytest.mark.parametrize("args, message", [
    ({"mode": "torch-ddp", "loader": "torch"}, "--loader applies to runs with --data PATH"),
    ({"mode": "torch-ddp", "loader_workers": 2}, "--loader-workers applies to runs with --data PATH"),
    ({"mode": "tf-native", "strategy": "mirrored", "data": "JPEGS"}, "--strategy mirrored does not read --data"),
    ({"mode": "tf-native", "strategy": "ps", "data": "JPEGS"}, "--strategy ps does not read --data"),
    ({"mode": "torch-hybrid", "model": "transformer-small", "data": "JPEGS"}, "torch-hybrid trains the text"),
    ({"mode": "torch-ddp", "model": "transformer-base", "data": "JPEGS"}, "--data reads image datasets"),
    ({"mode": "torch-ddp", "data": "JPEGS", "loader": "tf"}, "--loader tf feeds tensorflow; torch-ddp is torch"),
    ({"mode": "tf-horovod", "data": "JPEGS", "loader": "nvjpeg"}, "unknown --loader 'nvjpeg'"),
    ({"mode": "torch-ddp", "data": "NOWHERE"}, "no such file or folder"),
    ({"mode": "torch-ddp", "data": "JPEGS", "loader_workers": -1}, "--loader-workers must be an integer >= 0"),
])
def test_data_options_refuse_what_cannot_run_in_one_line(jpegs, tmp_path, args, message):
    args = {k: str(jpegs) if v == "JPEGS" else str(tmp_path / "none") if v == "NOWHERE" else v
            for k, v in args.items()}
    with pytest.raises(BenchError, match=message):
        RunConfig(**args)


def test_dali_feeds_either_framework(jpegs):
    assert RunConfig(mode="torch-ddp", data=str(jpegs), loader="dali").loader == "dali"
    assert RunConfig(mode="tf-horovod", data=str(jpegs), loader="dali").loader == "dali"


def test_a_tokens_dataset_is_refused_by_the_image_modes(tmp_path):
    make(MakeConfig(path=str(tmp_path / "t"), format="tokens", images=20, classes=50, seq_len=8))
    with pytest.raises(BenchError, match="holds token ids"):
        RunConfig(mode="torch-ddp", data=str(tmp_path / "t"))


def test_a_data_run_takes_the_datasets_classes_and_its_frameworks_loader(jpegs):
    torch_cfg = RunConfig(mode="torch-ddp", data=str(jpegs)).resolve("cpu", 2)
    assert torch_cfg.num_classes == 4 and torch_cfg.loader == "torch"
    assert RunConfig(mode="tf-horovod", data=str(jpegs)).resolve("cpu", 2).loader == "tf"
    assert RunConfig(mode="torch-ddp").resolve("cpu", 2).loader is None  # synthetic: no loader


def test_the_parent_checks_samples_and_classes_before_any_rank_starts(jpegs):
    assert feed.check(RunConfig(mode="torch-ddp", data=str(jpegs)).resolve("cpu", 2))["train_samples"] == 40
    with pytest.raises(BenchError, match="fewer than 3 rank"):
        feed.check(RunConfig(mode="torch-ddp", data=str(jpegs), batch_size=16).resolve("cpu", 3))
    with pytest.raises(BenchError, match="has 4 classes; --num-classes 3 is fewer"):
        feed.check(RunConfig(mode="torch-ddp", data=str(jpegs), num_classes=3).resolve("cpu", 2))


def rank(r, waits, windows=(1.0, 1.0)):
    return {"rank": r, "host": "h", "window_s": list(windows),
            "data": {"wait_step_s": waits, "h2d_step_s": None, "loader_rate": 100.0 + r, "workers": 1, "epochs": 1.5,
                     "format": "imagefolder", "classes": 4, "train_samples": 40}}


def test_the_input_section_gives_each_ranks_wait_share_and_the_rank_that_sets_the_pace(jpegs):
    cfg = RunConfig(mode="torch-ddp", data=str(jpegs)).resolve("cpu", 2)
    section = feed.section(cfg, [rank(0, [0.01, 0.01]), rank(1, [0.2, 0.1, 0.0])])
    assert [p["wait_share"] for p in section["per_rank"]] == pytest.approx([0.01, 0.15])
    assert section["paced_by_rank"] == 1 and section["wait_share_max"] == pytest.approx(0.15)
    assert section["per_rank"][1]["wait_step_s"] == [0.2, 0.1, 0.0]  # the raw waits are kept
    calm = feed.section(cfg, [rank(0, [0.01]), rank(1, [0.05, 0.1])])
    assert calm["paced_by_rank"] is None  # 7.5% < 10%
    assert feed.section(RunConfig(mode="torch-ddp").resolve("cpu", 2), [])["source"] == "synthetic"
    rows = dict((label, value) for label, value, _ in feed.table_rows(section))
    assert rows["input sets the pace"] == "rank 1" and rows["data wait, share of step (max rank)"] == "15.0"


def test_the_input_cost_is_the_share_of_synthetic_throughput_lost():
    from bench.commands.compare import input_cost

    assert input_cost("synthetic", "imagefolder via torch", 100.0, 80.0) == pytest.approx(0.2)
    assert input_cost("imagefolder via torch", "synthetic", 80.0, 100.0) == pytest.approx(0.2)
    assert input_cost("synthetic", "synthetic", 100.0, 80.0) is None


@pytest.fixture(scope="module")
def torch_run(jpegs, tmp_path_factory):
    """One torch-ddp run at np 2 from the JPEGs, long enough to turn an epoch (20 samples per rank, batch 4: 5
    steps an epoch; 1 + 1 + 3 x 3 = 11 steps), and its synthetic twin for bench compare."""
    out = tmp_path_factory.mktemp("torch-data")
    common = ["--np", "2", "--image-size", "32", "--batch-size", "4", "--warmup-steps", "1",
              "--steps-per-window", "3", "--windows", "3", "--model", "resnet50"]
    data = bench("torch-ddp", *common, "--data", str(jpegs), "--loader-workers", "1", "--output", str(out / "d"))
    synthetic = bench("torch-ddp", *common, "--num-classes", "4", "--output", str(out / "s"))
    return data, synthetic, out


@pytest.mark.multiproc
def test_torch_ddp_trains_from_the_files_and_says_what_the_data_cost(torch_run):
    data, _, out = torch_run
    assert data.returncode == 0, data.stderr
    result = only_result(out / "d")
    section = result["input"]
    assert section["source"] == "dataset" and section["format"] == "imagefolder" and section["loader"] == "torch"
    assert result["config"]["num_classes"] == 4 and result["sync"]["ranks_in_sync"]
    assert result["sync"]["params_changed"]
    for p in section["per_rank"]:
        assert len(p["wait_step_s"]) == 9 and p["workers"] == 1  # the timed steps' waits, raw
        assert p["epochs"] == pytest.approx(11 / 5)  # the epoch turned inside the run
        assert p["loader_rate"] > 0 and 0 <= p["wait_share"] < 1
        assert p["h2d_s"] is None  # no copy on a CPU
    assert "input" in data.stdout and "data wait" in data.stdout


@pytest.mark.multiproc
def test_compare_and_report_give_the_share_of_throughput_the_input_pipeline_costs(torch_run):
    _, synthetic, out = torch_run
    assert synthetic.returncode == 0, synthetic.stderr
    assert only_result(out / "s")["input"]["source"] == "synthetic"
    compared = bench("compare", str(out / "s"), str(out / "d"))
    assert compared.returncode == 0, compared.stderr
    assert "input pipeline: costs" in compared.stdout and "of the synthetic throughput" in compared.stdout
    report = bench("report", str(out / "s"), str(out / "d"), "--out", str(out / "report"))
    assert report.returncode == 0, report.stderr
    text = (out / "report" / "report.md").read_text()
    section = text.split("## What the data costs", 1)[1]
    assert "| torch-ddp |" in section and "data: imagefolder via torch" in section and "%" in section
    assert "| data wait |" in text  # the attribution table's column, filled for the --data run


@pytest.mark.multiproc
@pytest.mark.parametrize("mode", ["tf-horovod", "tf-native"])
def test_tensorflow_trains_from_the_files_through_tf_data(jpegs, out, mode):
    """tf-horovod, and tf-native's multiworker strategy (each worker's one replica fed by its own shard)."""
    run = bench(mode, "--model", "resnet50", "--np", "2", "--image-size", "32", "--batch-size", "4",
                "--warmup-steps", "1",
                "--steps-per-window", "3", "--windows", "2", "--attribution-steps", "0", "--data", str(jpegs),
                "--output", str(out))
    assert run.returncode == 0, run.stderr
    result = only_result(out)
    assert result["input"]["loader"] == "tf" and result["sync"]["ranks_in_sync"] and result["world_size"] == 2
    assert all(len(p["wait_step_s"]) == 6 for p in result["input"]["per_rank"])


@pytest.mark.multiproc
def test_a_file_that_cannot_be_decoded_stops_the_run_in_one_line_naming_it(jpegs, tmp_path, out):
    broken = tmp_path / "broken"
    shutil.copytree(jpegs, broken)
    bad = sorted((broken / "train").rglob("*.JPEG"))[3]
    bad.write_bytes(b"not a jpeg")
    run = bench("torch-single", "--image-size", "32", "--batch-size", "20", "--warmup-steps", "0",
                "--steps-per-window", "1", "--windows", "1", "--data", str(broken), "--loader-workers", "0",
                "--output", str(out))
    assert run.returncode != 0
    named = [line for line in run.stderr.splitlines() if bad.name in line]
    assert len(named) == 1 and "cannot decode" in named[0] and "Traceback" not in run.stderr, run.stderr
    assert not (out.exists() and list(out.glob("*.json")))  # no result, not even a partial one


@pytest.mark.multiproc
def test_dali_feeds_a_pytorch_rank_from_its_cpu_pipeline(jpegs, out):
    run = bench("torch-single", "--image-size", "32", "--batch-size", "4", "--warmup-steps", "1",
                "--steps-per-window", "3", "--windows", "2", "--data", str(jpegs), "--loader", "dali",
                "--loader-workers", "1", "--output", str(out))
    assert run.returncode == 0, run.stderr
    section = only_result(out)["input"]
    assert section["loader"] == "dali" and section["per_rank"][0]["loader_rate"] > 0
    assert len(section["per_rank"][0]["wait_step_s"]) == 6
