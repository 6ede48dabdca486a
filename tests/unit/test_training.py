"""Training to a goal (--epochs, --target-accuracy; bench.measure.goal): the options' checks in one line, the
schedule's and the evaluation's formulas, the training section; and real runs on scikit-learn's handwritten digits
that reach the target in every distributed mode (one shared run per mode)."""

import math
from pathlib import Path

import pytest

from bench.commands.converge import ConvergeConfig
from bench.commands.sweep import SweepMatrix
from bench.config import RunConfig
from bench.data import feed
from bench.data.make import MakeConfig, make
from bench.errors import BenchError
from bench.measure import goal
from tests import samples


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
    ({"warmup_epochs": 1.0}, "--warmup-epochs applies to runs with --epochs N"),
    ({"epochs": 2, "lr_decay": "exp"}, "--lr-decay takes cosine, step, none"),
    ({"epochs": 2, "lr_scaling": "sqrt"}, "--lr-scaling takes linear or none"),
    ({"optimizer": "adagrad"}, "--optimizer applies to runs with --epochs N"),
    ({"epochs": 2, "optimizer": "adam"}, "--optimizer takes sgd, adagrad"),
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


def test_the_default_warmup_grows_with_the_global_batch_where_the_rate_scales_with_it(digits):
    """Issue 66 item 10: linear scaling with no warmup at any batch. The default: one epoch per doubling of the
    global batch past 256, at most 5 (Goyal et al.'s at 8k) and a quarter of the epochs; what the user gives wins."""
    def resolved(np, batch, epochs=40, **kw):
        return RunConfig(mode="torch-ddp", model="resnet20", data=str(digits), epochs=epochs, batch_size=batch,
                         **kw).resolve("cpu", np)
    assert resolved(2, 32).warmup_epochs == 0.0  # global 64: the reference batch's rate or below, no warmup
    assert resolved(2, 128).warmup_epochs == 0.0  # global 256
    assert resolved(4, 128).warmup_epochs == 1.0  # global 512: one doubling
    assert resolved(8, 96).warmup_epochs == pytest.approx(1.58, abs=0.01)  # global 768: log2(3)
    assert resolved(8, 128, epochs=6).warmup_epochs == 1.5  # global 1024, two doublings; a quarter of 6 epochs
    assert resolved(4, 128, warmup_epochs=0.0).warmup_epochs == 0.0
    assert resolved(4, 128, lr_scaling="none").warmup_epochs == 0.0
    # a config written by the hvdbench before this default (warmup_epochs 0.0 in every run's JSON) still runs
    assert RunConfig(mode="torch-ddp", warmup_epochs=0.0).warmup_epochs == 0.0
    assert goal.warmup_epochs(type("Cfg", (), {"warmup_epochs": None, "lr_scaling": "linear", "epochs": 90})(),
                              32 * 256) == goal.MAX_WARMUP_EPOCHS == 5.0  # 8k: five doublings, at the bound
    assert goal.warmup_epochs(type("Cfg", (), {"warmup_epochs": None, "lr_scaling": "linear", "epochs": 90})(),
                              64 * 256) == 5.0


def test_asynchronous_workers_scale_the_rate_by_one_workers_batch_and_lower_the_momentum(digits):
    """tf-native ps: an update applies one worker's batch, and asynchrony adds momentum of its own (about
    1 - 1/W), which the optimizer's makes room for (goal.async_momentum); synchronous modes keep 0.9."""
    def resolved(mode, strategy, np):
        return RunConfig(mode=mode, strategy=strategy, model="resnet20", data=str(digits), epochs=3,
                         batch_size=32).resolve("cpu", np)
    two, one, sync = resolved("tf-native", "ps", 2), resolved("tf-native", "ps", 1), resolved("torch-ddp", None, 2)
    assert two.learning_rate == one.learning_rate == pytest.approx(0.1 * 32 / 256)
    assert (one.momentum, two.momentum, sync.momentum) == (0.9, pytest.approx(0.4), 0.9)
    assert sync.learning_rate == pytest.approx(0.1 * 64 / 256)
    assert [goal.async_momentum(0.9, w) for w in (1, 4, 10, 16)] == pytest.approx([0.9, 0.15, 0.0, 0.0])


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
    parts = [goal.Counts(samples=100, correct1=90, correct5=99, loss_sum=30.0, train_loss=0.5),
             goal.Counts(samples=80, correct1=72, correct5=80, loss_sum=20.0, train_loss=0.7),
             goal.Counts(samples=20, correct1=20, correct5=20, loss_sum=0.0)]  # a rank with no step since
    scores = goal.reduce_counts(parts)
    assert scores.samples == 200
    assert scores.top1 == pytest.approx(182 / 200) and scores.top5 == pytest.approx(199 / 200)
    assert scores.loss == pytest.approx(50 / 200) and scores.train_loss == pytest.approx(0.6)
    with pytest.raises(BenchError, match="no sample to evaluate"):
        goal.reduce_counts([goal.Counts()])


def goal_run(target, accuracies, digits):
    cfg = RunConfig(mode="torch-ddp", model="resnet20", data=str(digits), epochs=len(accuracies),
                    target_accuracy=target).resolve("cpu", 2)
    tracker = goal.Goal(cfg, global_batch=64, steps_per_epoch=cfg.steps_per_window)
    stopped = None
    for epoch, acc in enumerate(accuracies, start=1):
        scores = goal.Scores(samples=360, top1=acc, top5=1.0, loss=0.1, train_loss=0.2)
        if tracker.add(epoch, 10.0 * epoch, 0.5, scores, 0.1):
            stopped = epoch
            break
    return cfg, stopped, goal.section(cfg, [samples.rank(0, goal=tracker.record())], init_s=7.0)


def test_the_run_stops_at_the_first_evaluation_at_the_target_and_says_when(digits):
    cfg, stopped, section = goal_run(0.9, [0.5, 0.91, 0.95], digits)
    assert stopped == 2 and section.reached is True and section.epochs_to_target == 2
    assert section.time_to_target_s == 20.0 and section.time_to_target_with_init_s == 27.0
    assert section.samples_to_target == 64 * (2 * cfg.steps_per_window + 1)  # the init step's batch included
    assert section.eval_s_total == 1.0 and len(section.curve) == 2
    rows = dict((label, value) for label, value, _ in goal.table_rows(section))
    assert rows["time to target"] == "20.0"


def test_a_target_not_reached_is_said_with_the_best_accuracy(digits):
    _, stopped, section = goal_run(0.99, [0.5, 0.9], digits)
    assert stopped is None and section.reached is False and section.time_to_target_s is None
    assert "top-1 0.9000 at best after 2 epoch(s), below the target 0.99" in section.not_reached
    rows = goal.table_rows(section)
    assert dict((r[0], r[1]) for r in rows)["time to target"] == "NOT REACHED"


def test_a_run_without_epochs_has_no_training_section():
    assert goal.section(RunConfig(mode="torch-ddp"), [samples.rank(0)], 1.0) is None


def test_converge_refuses_a_run_without_a_target_in_one_line(digits, cli):
    proc = cli("converge", "--data", str(digits), "--epochs", "2")
    assert proc.returncode != 0 and "bench converge needs --target-accuracy A" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_sweep_repeats_each_cell_once_per_seed_and_converge_trains_every_epoch(digits):
    cells = SweepMatrix(modes=["torch-ddp"], nps=[2], seeds=[1, 2]).cells()
    assert [c.id for c in cells] == ["torch-ddp_np2_vgg16_fp32_bdefault_s1", "torch-ddp_np2_vgg16_fp32_bdefault_s2"]
    assert [c.config({}, Path(".")).seed for c in cells] == [1, 2]
    assert SweepMatrix(modes=["torch-ddp"], nps=[2]).cells()[0].id == "torch-ddp_np2_vgg16_fp32_bdefault"
    with pytest.raises(BenchError, match="--seeds needs one or more different seeds"):
        SweepMatrix(modes=["torch-ddp"], nps=[2], seeds=[1, 1])
    sweep = ConvergeConfig(repeats=3, common={"data": str(digits), "epochs": 2, "target_accuracy": 0.9}).sweep()
    assert sweep.seeds == [1, 2, 3] and sweep.common["stop_at_target"] is False
    assert {c.model for c in sweep.cells()} == {"resnet20"} and {c.np for c in sweep.cells()} == {1, 2}


def test_converge_reads_only_its_matrix_run_with_its_options_and_a_missing_cell_fails(digits, tmp_path, monkeypatch):
    """Rerunning bench converge into the same folder with another target: a cell's manifest entry records the
    options it ran with, so every cell is not done and runs again, and only the results of this matrix at these
    options are read (never the folder's other files); a cell without a result is a reason to FAIL."""
    import json

    from bench.commands.converge import matrix_results, summarise
    from bench.hooks import HOOKS_ENV

    common = {"data": str(digits), "epochs": 2, "target_accuracy": 0.9}
    sweep = ConvergeConfig(modes=("torch-ddp",), nps=(1,), repeats=2, common=common).sweep()
    again = ConvergeConfig(modes=("torch-ddp",), nps=(1,), repeats=2, common={**common, "target_accuracy": 0.95})
    assert again.sweep().options_key() != sweep.options_key()
    monkeypatch.setenv(HOOKS_ENV, '{"fault": "skip-allreduce"}')
    faulted = sweep.options_key()
    monkeypatch.delenv(HOOKS_ENV)
    assert faulted != sweep.options_key()  # a --fault run is not the same cell as a clean one

    first, second = sweep.cells()
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "old.json").write_text("{}")
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "hvdbench-sweep", "cells": {
        first.id: {"status": "ok", "result": "a.json", "options": sweep.options_key()},
        second.id: {"status": "ok", "result": "old.json", "options": again.sweep().options_key()}}}))
    paths, missing = matrix_results(sweep, tmp_path)
    assert paths == [tmp_path / "a.json"] and missing == [f"{second.id}: no result (run with other options)"]
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "hvdbench-sweep", "cells": {
        first.id: {"status": "failed", "error": "rank 1 exited with code 1", "options": sweep.options_key()}}}))
    paths, missing = matrix_results(sweep, tmp_path)
    assert paths == [] and missing == [f"{first.id}: no result (rank 1 exited with code 1)",
                                       f"{second.id}: no result (never run)"]
    with pytest.raises(BenchError, match="no run of this matrix left a result in"):
        summarise(tmp_path, 0.02, sweep)
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "hvdbench-sweep", "cells": {
        first.id: {"status": "failed", "result": "a.json", "error": "rank 0 found the run not valid",
                   "options": sweep.options_key()}}}))
    paths, failures = matrix_results(sweep, tmp_path)  # a run found not valid: its result is read, its failure too
    assert paths == [tmp_path / "a.json"] and failures[0] == f"{first.id}: failed (rank 0 found the run not valid)"
