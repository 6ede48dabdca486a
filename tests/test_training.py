"""Training to a goal (--epochs, --target-accuracy; bench.measure.goal): the options' checks in one line, the
schedule's and the evaluation's formulas, the training section; and real runs on scikit-learn's handwritten digits
that reach the target in every distributed mode (one shared run per mode)."""

import json
import math
from pathlib import Path

import pytest
from conftest import bench

from bench.commands.converge import ConvergeConfig
from bench.commands.sweep import SweepConfig
from bench.config import RunConfig
from bench.data import feed
from bench.data.make import MakeConfig, make
from bench.errors import BenchError
from bench.measure import goal
from bench.records import store

# The convergence runs: digits (1438 training, 359 held-out images) at 12 x 12, ResNet-20, batch 32 per rank,
# 10 epochs, the rate 0.8 per 256 (0.2 at np 2) after one epoch of warmup, then cosine.
TARGET = 0.95
EPOCHS = 10
TRAINING = ["--image-size", "12", "--batch-size", "32", "--epochs", str(EPOCHS), "--target-accuracy", str(TARGET),
            "--base-lr", "0.8", "--warmup-epochs", "1", "--loader-workers", "1"]
MODES = ("torch-ddp", "torch-horovod", "tf-horovod", "tf-native")


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """scikit-learn's handwritten digits in the CIFAR-10 format, made once for this file."""
    root = tmp_path_factory.mktemp("data") / "digits"
    make(MakeConfig(path=str(root), format="cifar", source="digits"))
    return root


@pytest.mark.parametrize("args, message", [
    ({"target_accuracy": 0.9}, "--target-accuracy applies to runs with --epochs N"),
    ({"lr_decay": "step"}, "--lr-decay applies to runs with --epochs N"),
    ({"epochs": 2, "data": None}, "--epochs trains on a dataset: add --data PATH"),
    ({"epochs": 2, "target_accuracy": 1.5}, "--target-accuracy is a top-1 accuracy: 0 < A <= 1"),
    ({"epochs": 2, "target_accuracy": 0}, "--target-accuracy is a top-1 accuracy: 0 < A <= 1"),
    ({"epochs": 2, "duration": 30, "stop_at_target": False}, "--duration and --all-epochs contradict"),
    ({"checkpoint_every": 2}, "--checkpoint-every applies to runs with --epochs N"),
    ({"resume_from": "ckpt"}, "--resume-from applies to runs with --epochs N"),
    ({"epochs": 2, "checkpoint_dir": "ckpt"}, "--checkpoint-dir applies to runs with --checkpoint-every N"),
    ({"epochs": 4, "eval_every": 2, "checkpoint_every": 3}, "--checkpoint-every 3 must be a multiple of --eval-every"),
    ({"epochs": 2, "windows": 3}, "--epochs and --windows contradict"),
    ({"epochs": 2, "warmup_steps": 3}, "--epochs and --warmup-steps contradict"),
    ({"epochs": 2, "warmup_epochs": 2}, "--warmup-epochs must be >= 0 and below --epochs 2"),
    ({"epochs": 2, "lr_decay": "exp"}, "--lr-decay takes cosine, step, none"),
    ({"epochs": 2, "lr_scaling": "sqrt"}, "--lr-scaling takes linear or none"),
    ({"epochs": 2, "label_smoothing": 1.0}, "--label-smoothing must be >= 0 and < 1"),
    ({"epochs": 2, "weight_decay": -1e-4}, "--weight-decay must be >= 0"),
    ({"epochs": 0}, "--epochs must be an integer >= 1"),
])
def test_goal_options_refuse_what_contradicts_in_one_line(digits, args, message):
    with pytest.raises(BenchError, match=message):
        RunConfig(**{"mode": "torch-ddp", "model": "resnet20", "data": str(digits), **args})


def test_a_dataset_without_a_held_out_split_cannot_train_to_a_goal(tmp_path):
    root = tmp_path / "d"
    make(MakeConfig(path=str(root), format="cifar", source="digits"))
    (root / "cifar-10-batches-py" / "test_batch").unlink()
    cfg = RunConfig(mode="torch-ddp", model="resnet20", data=str(root), epochs=2).resolve("cpu", 2)
    with pytest.raises(BenchError, match="--epochs evaluates on the held-out split; .* has none"):
        feed.check(cfg)


def test_epochs_make_every_window_one_epoch_of_the_ranks_shard_and_scale_the_rate(digits):
    cfg = RunConfig(mode="torch-ddp", model="resnet20", data=str(digits), epochs=3, batch_size=32).resolve("cpu", 2)
    assert cfg.steps_per_window == (1437 // 2) // 32 == 22
    assert (cfg.windows, cfg.warmup_steps, cfg.attribution_steps, cfg.eval_every) == (3, 0, 0, 1)
    assert cfg.learning_rate == pytest.approx(0.1 * 64 / 256)  # base 0.1 x global batch / 256
    assert cfg.weight_decay == goal.WEIGHT_DECAY
    plain = RunConfig(mode="torch-ddp", model="resnet20", data=str(digits), epochs=3, batch_size=32,
                      base_lr=0.2, lr_scaling="none").resolve("cpu", 4)
    assert plain.learning_rate == 0.2 and plain.steps_per_window == (1437 // 4) // 32
    assert RunConfig(mode="torch-ddp").resolve("cpu", 2).weight_decay is None  # a throughput run: no decay


def schedule(**kw):
    """A schedule of 4 epochs of 10 steps at a peak rate of 1."""
    defaults = {"learning_rate": 1.0, "epochs": 4, "warmup_epochs": 0.0, "lr_decay": "cosine"}
    return goal.Schedule(type("Cfg", (), {**defaults, **kw})(), steps_per_epoch=10)


def test_the_schedule_warms_up_linearly_then_decays_as_declared():
    warm = schedule(warmup_epochs=1.0)
    assert [warm.rate(s) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    assert warm.rate(10) == pytest.approx(1.0)  # the first step after the warmup: the peak, cosine at t = 0
    assert warm.rate(25) == pytest.approx((1 + math.cos(math.pi * 15 / 30)) / 2)
    assert warm.rate(40) == pytest.approx(0.0) and warm.rate(41) == pytest.approx(0.0)
    step = schedule(lr_decay="step")
    assert [step.rate(s) for s in (19, 20, 29, 30, 39)] == pytest.approx([1.0, 0.1, 0.1, 0.01, 0.01])
    flat = schedule(lr_decay="none")
    assert flat.next() == flat.next() == 1.0 and flat.taken == 2


def test_evaluation_counts_are_summed_over_ranks_and_the_training_loss_averaged():
    parts = [{"samples": 100, "correct1": 90, "correct5": 99, "loss_sum": 30.0, "train_loss": 0.5},
             {"samples": 80, "correct1": 72, "correct5": 80, "loss_sum": 20.0, "train_loss": 0.7}]
    scores = goal.reduce_counts(parts)
    assert scores["top1"] == pytest.approx(162 / 180) and scores["top5"] == pytest.approx(179 / 180)
    assert scores["loss"] == pytest.approx(50 / 180) and scores["train_loss"] == pytest.approx(0.6)
    with pytest.raises(BenchError, match="no sample to evaluate"):
        goal.reduce_counts([{"samples": 0, "correct1": 0, "correct5": 0, "loss_sum": 0.0}])


def goal_run(target, accuracies, digits):
    cfg = RunConfig(mode="torch-ddp", model="resnet20", data=str(digits), epochs=len(accuracies),
                    target_accuracy=target).resolve("cpu", 2)
    tracker = goal.Goal(cfg, global_batch=64, steps_per_epoch=cfg.steps_per_window)
    stopped = None
    for epoch, acc in enumerate(accuracies, start=1):
        scores = {"samples": 360, "top1": acc, "top5": 1.0, "loss": 0.1, "train_loss": 0.2}
        if tracker.add(epoch, 10.0 * epoch, 0.5, scores, 0.1):
            stopped = epoch
            break
    return cfg, stopped, goal.section(cfg, [{"goal": tracker.record()}], init_s=7.0)


def test_the_run_stops_at_the_first_evaluation_at_the_target_and_says_when(digits):
    cfg, stopped, section = goal_run(0.9, [0.5, 0.91, 0.95], digits)
    assert stopped == 2 and section["reached"] is True and section["epochs_to_target"] == 2
    assert section["time_to_target_s"] == 20.0 and section["time_to_target_with_init_s"] == 27.0
    assert section["samples_to_target"] == 64 * (2 * cfg.steps_per_window + 1)  # the init step's batch included
    assert section["eval_s_total"] == 1.0 and len(section["curve"]) == 2
    rows = dict((label, value) for label, value, _ in goal.table_rows(section))
    assert rows["time to target"] == "20.0"


def test_a_target_not_reached_is_said_with_the_best_accuracy(digits):
    _, stopped, section = goal_run(0.99, [0.5, 0.9], digits)
    assert stopped is None and section["reached"] is False and section["time_to_target_s"] is None
    assert "top-1 0.9000 at best after 2 epoch(s), below the target 0.99" in section["not_reached"]
    assert dict((r[0], r[1]) for r in goal.table_rows(section))["time to target"] == "NOT REACHED"


def test_a_run_without_epochs_has_no_training_section():
    assert goal.section(RunConfig(mode="torch-ddp"), [{"goal": None}], 1.0) is None


@pytest.fixture(scope="module")
def converged(digits, tmp_path_factory):
    """The one shared convergence run: bench converge over every distributed mode at np 2, once each."""
    out = tmp_path_factory.mktemp("converge")
    proc = bench("converge", "--modes", ",".join(MODES), "--np", "2", "--repeats", "1", "--data", str(digits),
                 *TRAINING, "--output", str(out), timeout=1500)
    return proc, out


@pytest.mark.multiproc
def test_every_distributed_mode_reaches_the_target_on_real_digits_and_they_agree(converged):
    proc, out = converged
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "converge: PASS" in proc.stdout
    record = store.read(next(out.glob("*-converge-*.json")), store.Kind.CONVERGE)
    assert record["verdict"] == "PASS" and not record["reasons"]
    assert sorted(r["mode"] for r in record["rows"]) == sorted(m.replace("tf-native", "tf-native:multiworker")
                                                                for m in MODES)
    for row in record["rows"]:
        assert row["reached"] == 1 and row["in_sync"] and row["final_top1"] >= TARGET, row
        assert 0 < row["time_to_target_s"] and 1 <= row["epochs_to_target"] <= EPOCHS
    assert (out / "converge.png").stat().st_size > 0 and "Verdict: **PASS**" in (out / "converge.md").read_text()


@pytest.mark.multiproc
def test_each_result_keeps_its_curve_and_every_epoch_was_trained(converged):
    _, out = converged
    results = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    results = [r for r in results if store.kind_of(r) is store.Kind.RESULT]
    assert len(results) == len(MODES)
    for r in results:
        training = r["training"]
        assert [c["epoch"] for c in training["curve"]] == list(range(1, EPOCHS + 1))  # --all-epochs
        walls = [c["wall_s"] for c in training["curve"]]
        assert walls == sorted(walls) and all(c["eval_samples"] == 359 for c in training["curve"])
        assert training["curve"][-1]["learning_rate"] < training["schedule"]["peak_lr"] / 10  # cosine to ~0
        assert training["time_to_target_with_init_s"] == pytest.approx(r["timing"]["init_s"]
                                                                       + training["time_to_target_s"])
        assert len(r["samples"]["window_s"][0]) == EPOCHS  # every epoch a timed window, evaluations outside


@pytest.mark.multiproc
def test_report_draws_the_curves_of_a_folder_that_trained_to_a_target(converged):
    _, out = converged
    proc = bench("report", str(out), "--out", str(out / "report"))
    assert proc.returncode == 0, proc.stderr
    text = (out / "report" / "report.md").read_text()
    section = text.split("## Training to a target", 1)[1]
    assert "| tf-native:multiworker | 2 | 1/1 |" in section and "Verdict: **PASS**" in section
    assert (out / "report" / "accuracy.png").stat().st_size > 0


@pytest.mark.multiproc
def test_a_run_whose_gradients_were_not_averaged_is_caught(digits, tmp_path):
    proc = bench("converge", "--modes", "torch-ddp", "--np", "2", "--repeats", "1", "--data", str(digits),
                 *TRAINING[:4], "--epochs", "1", "--target-accuracy", str(TARGET), "--fault", "skip-allreduce",
                 "--output", str(tmp_path), timeout=600)
    assert proc.returncode == 1 and "converge: FAIL" in proc.stdout
    record = store.read(next(tmp_path.glob("*-converge-*.json")), store.Kind.CONVERGE)
    assert any("parameters differ" in reason for reason in record["reasons"]), record["reasons"]


def test_converge_refuses_a_run_without_a_target_in_one_line(digits, cli):
    proc = cli("converge", "--data", str(digits), "--epochs", "2")
    assert proc.returncode != 0 and "bench converge needs --target-accuracy A" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_sweep_repeats_each_cell_once_per_seed_and_converge_trains_every_epoch(digits):
    cells = SweepConfig(modes=["torch-ddp"], nps=[2], seeds=[1, 2]).cells()
    assert [c.id for c in cells] == ["torch-ddp_np2_vgg16_fp32_bdefault_s1", "torch-ddp_np2_vgg16_fp32_bdefault_s2"]
    assert [c.config({}, Path(".")).seed for c in cells] == [1, 2]
    assert SweepConfig(modes=["torch-ddp"], nps=[2]).cells()[0].id == "torch-ddp_np2_vgg16_fp32_bdefault"
    with pytest.raises(BenchError, match="--seeds needs one or more different seeds"):
        SweepConfig(modes=["torch-ddp"], nps=[2], seeds=[1, 1])
    sweep = ConvergeConfig(repeats=3, common={"data": str(digits), "epochs": 2, "target_accuracy": 0.9}).sweep()
    assert sweep.seeds == [1, 2, 3] and sweep.common["stop_at_target"] is False
    assert {c.model for c in sweep.cells()} == {"resnet20"} and {c.np for c in sweep.cells()} == {1, 2}
