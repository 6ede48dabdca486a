"""Training from a dataset (--data) in real runs of both frameworks' pipelines (one shared run per framework), and
bench compare's and bench report's input cost from them (the options' checks and the formulas: tests/unit/)."""

import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import bench, bench_env, only_result


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
        # the clock started with the rank's input queue empty, or held over its depth's steps (bench.data.feed)
        assert p["queue_depth"] == 2 and (p["queue_at_start"] == 0 or p["settle_steps"] >= 2), p
        assert p["epochs"] == pytest.approx((11 + p["settle_steps"]) / 5)  # the epoch turned inside the run
        assert p["loader_rate"] > 0 and 0 <= p["wait_share"] < 1
        assert p["h2d_s"] is None  # no copy on a CPU
    assert "input" in data.stdout and "data wait" in data.stdout


def test_compare_and_report_give_the_share_of_throughput_the_input_pipeline_costs(torch_run):
    _, synthetic, out = torch_run
    assert synthetic.returncode == 0, synthetic.stderr
    assert only_result(out / "s")["input"]["source"] == "synthetic"
    compared = bench("compare", str(out / "s"), str(out / "d"))
    assert compared.returncode == 0, compared.stderr
    assert "input pipeline: costs" in compared.stdout and "of the synthetic throughput" in compared.stdout
    report = bench("report", str(out / "s"), str(out / "d"), "--output", str(out / "report"))
    assert report.returncode == 0, report.stderr
    text = (out / "report" / "report.md").read_text()
    section = text.split("## What the data costs", 1)[1]
    assert "| torch-ddp |" in section and "data: imagefolder via torch" in section and "%" in section
    assert "| data wait |" in text  # the attribution table's column, filled for the --data run


@pytest.mark.parametrize("mode, np", [("tf-horovod", 2), ("tf-native", 2), ("tf-native:mirrored", 1),
                                      ("tf-native:ps", 2)])
def test_tensorflow_trains_from_the_files_through_tf_data(jpegs, out, mode, np):
    """tf-horovod, tf-native's multiworker strategy (each worker's one replica fed by its own shard), its
    mirrored one (one process's feed reads every local replica's batch; on the CPU, one replica) and its ps one
    (each worker reads its shard through a pipeline built on it, inside the coordinator's closures, which time
    their waits). ResNet-20: the feed is what is tested, and its graph traces in a fraction of ResNet-50's time."""
    name, _, strategy = mode.partition(":")
    run = bench(name, *(["--strategy", strategy] if strategy else []), "--model", "resnet20", "--np", str(np),
                "--image-size", "32", "--batch-size", "4", "--warmup-steps", "1", "--steps-per-window", "3",
                "--windows", "2", "--attribution-steps", "0", "--data", str(jpegs), "--output", str(out))
    assert run.returncode == 0, run.stderr
    result = only_result(out)
    assert result["input"]["loader"] == "tf" and result["sync"]["ranks_in_sync"] and result["world_size"] == np
    fed = result["input"]["per_rank"]
    if strategy == "ps":  # a row per worker, from the closures the coordinator handed to whichever was free
        assert [p["worker"] for p in fed] == [0, 1] and sum(len(p["wait_step_s"]) for p in fed) == 2 * 3 * np
        assert sum(p["wait_s"] for p in fed) > 0
        # the pacing worker: the one with the largest wait share, where it reaches pace_share; the table says it
        section, top = result["input"], max(fed, key=lambda p: p["wait_share"])
        paced = top["worker"] if top["wait_share"] >= section["pace_share"] else None
        assert section["paced_by_worker"] == paced and section["paced_by_rank"] is None, section
        said = re.search(r"input sets the pace\W+(worker \d+|no)\b", run.stdout)
        assert said and said.group(1) == (f"worker {paced}" if paced is not None else "no"), run.stdout[-2000:]
    else:
        assert all(len(p["wait_step_s"]) == 6 for p in fed)
    assert fed[0]["loader_rate"] > 0
    assert all(p["queue_at_start"] is None and p["settle_steps"] == 0 for p in fed)  # tf.data's queue: unread


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


def test_dali_feeds_a_pytorch_rank_from_its_cpu_pipeline(jpegs, out):
    run = bench("torch-single", "--image-size", "32", "--batch-size", "4", "--warmup-steps", "1",
                "--steps-per-window", "3", "--windows", "2", "--data", str(jpegs), "--loader", "dali",
                "--loader-workers", "1", "--output", str(out))
    assert run.returncode == 0, run.stderr
    section = only_result(out)["input"]
    assert section["loader"] == "dali" and section["per_rank"][0]["loader_rate"] > 0
    assert len(section["per_rank"][0]["wait_step_s"]) == 6


@pytest.mark.parametrize("mode, loader", [("torch-hybrid", "torch"), ("tf-horovod", "tf")])
def test_text_models_learn_real_text_from_a_file_of_token_ids_scored_per_token(text, out, mode, loader):
    """Each framework's pipeline reads the same samples of the memory-mapped ids; torch-hybrid looks their rows
    up in its sharded table (its fused Adagrad updating them), and its ranks evaluate in step (every forward pass
    is an all-to-all). Three epochs of Adagrad take the held-out next-token accuracy well past always guessing
    the most common byte (SGD with momentum stayed there: docs/training.md)."""
    run = bench(mode, "--model", "transformer-small", "--sparse-embeddings", "--np", "2", "--seq-len", "32",
                "--batch-size", "32", "--epochs", "3", "--optimizer", "adagrad", "--base-lr", "0.04",
                "--lr-scaling", "none", "--warmup-epochs", "1", "--weight-decay", "0", "--data", str(text),
                "--loader-workers", "1", "--output", str(out))
    assert run.returncode == 0, run.stderr
    result = only_result(out)
    fed = result["input"]
    assert fed["format"] == "tokens" and fed["loader"] == loader and fed["classes"] == 256
    assert result["sync"]["ranks_in_sync"] and result["config"]["num_classes"] == 256
    training = result["training"]
    assert training["schedule"]["optimizer"] == "adagrad" and training["schedule"]["momentum"] is None
    val = np.fromfile(text / "val.bin", dtype=np.uint16)
    last = training["curve"][-1]
    assert last["eval_samples"] == (len(val) - 1) // 64 * 32  # the held-out split's target tokens, each once
    guess = np.bincount(val).max() / len(val)  # always the most common byte: 0.18 (the space)
    assert last["top1"] > guess + 0.05 and last["top1"] <= last["top5"] <= 1, (guess, training["curve"])


def test_a_dataset_changed_during_the_run_leaves_one_line_and_no_result(jpegs, tmp_path, out):
    """A file added to a class folder while the run trains: rank 0 finds it before it writes, says what changed
    in one line, and writes nothing."""
    data = tmp_path / "data"
    shutil.copytree(jpegs, data)
    log = tmp_path / "log"
    # One intra-op thread: with two on two cores and another process busy on one, the run's 150 windows took over
    # 300 s (docs/development.md, "A test on a busy machine"); with one the whole test took 15.9 s beside it.
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "bench", "torch-single", "--model", "resnet20",
                                 "--image-size", "32", "--batch-size", "4", "--warmup-steps", "0",
                                 "--steps-per-window", "2", "--windows", "150", "--data", str(data),
                                 "--loader-workers", "0", "--output", str(out)], stdout=subprocess.DEVNULL,
                                stderr=err, env=bench_env(OMP_NUM_THREADS="1"))
    try:
        deadline = time.monotonic() + 240
        while "window 1" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, log.read_text()[-2000:]
        shutil.copy(next((data / "train").rglob("*.JPEG")), next((data / "train").iterdir()) / "added.JPEG")
        assert proc.wait(timeout=300) == 1
    finally:
        proc.kill()
    text = log.read_text()
    named = [line for line in text.splitlines() if "changed during the run (train/" in line]
    assert len(named) == 1 and named[0].startswith("rank 0: error: --data") and "nothing written" in named[0], text
    assert "Traceback" not in text and (not out.exists() or not list(out.glob("*.json")))
