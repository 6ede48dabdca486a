"""Checkpoints and resuming (--checkpoint-every, --resume-from; bench.measure.checkpoint), and the fixed-time run
(--duration with --epochs): the checks in process, then real runs on the digits: a run that loses a rank after a
checkpoint, resumed, ends with exactly the parameters of one never interrupted (PyTorch and TensorFlow)."""

import json
import os
import re
from pathlib import Path

import pytest

from bench.config import RunConfig
from bench.errors import BenchError
from bench.hooks import Hooks
from bench.measure import checkpoint, goal
from bench.measure.goal import Resumed, Training
from tests import samples

EPOCHS = 3


def resolved(digits, **kw) -> RunConfig:
    return RunConfig(**{"mode": "torch-ddp", "model": "resnet20", "data": str(digits), "epochs": EPOCHS,
                        "checkpoint_every": 1, **kw}).resolve("cpu", 2)


def written(tmp_path, cfg, epoch=2) -> str:
    """A checkpoint folder with the state.json ``cfg``'s run would write after ``epoch``."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    state = {"format": checkpoint.FORMAT, "config": checkpoint.configuration(cfg), "epoch": epoch,
             "schedule_taken": 1 + epoch * cfg.steps_per_window, "wall_s": 12.5, "save_s": 0.1,
             "written_utc": "2026-11-25T08:00:00Z",
             "goal": {"curve": [], "reached_at": None, "steps_per_epoch": cfg.steps_per_window}}
    (folder / checkpoint.STATE).write_text(json.dumps(state))
    return str(folder)


def test_a_checkpoint_resumes_only_the_configuration_it_belongs_to(digits, tmp_path):
    path = written(tmp_path, resolved(digits, batch_size=16))
    state = checkpoint.check(resolved(digits, batch_size=16, resume_from=path, output="elsewhere",
                                      loader_workers=3))
    assert state.epoch == 2  # where it writes and how many workers read: free to change
    with pytest.raises(BenchError, match=r"the checkpoint is of another configuration \(--batch-size 16 there, "
                                         r"32 here\)"):
        checkpoint.check(resolved(digits, resume_from=path, batch_size=32))
    with pytest.raises(BenchError, match=r"another configuration \(--mode torch-ddp there, torch-horovod here\)"):
        checkpoint.check(resolved(digits, batch_size=16, resume_from=path, mode="torch-horovod"))


def test_what_is_not_a_checkpoint_or_has_nothing_left_says_so(digits, tmp_path):
    with pytest.raises(BenchError, match="not a checkpoint \\(no state.json; --checkpoint-every N writes one\\)"):
        checkpoint.check(resolved(digits, resume_from=str(tmp_path)))
    (tmp_path / checkpoint.STATE).write_text("{not json")
    with pytest.raises(BenchError, match="cannot read state.json"):
        checkpoint.check(resolved(digits, resume_from=str(tmp_path)))
    (tmp_path / "done").mkdir()
    full = written(tmp_path / "done", resolved(digits), epoch=EPOCHS)
    with pytest.raises(BenchError, match=f"the checkpoint already holds all {EPOCHS} epoch"):
        checkpoint.check(resolved(digits, resume_from=full))
    part = json.loads((Path(full) / checkpoint.STATE).read_text())
    del part["goal"]["steps_per_epoch"]  # a field lost: one line naming it, never a KeyError later
    (Path(full) / checkpoint.STATE).write_text(json.dumps(part))
    with pytest.raises(BenchError, match=r"state.json does not match its schema \(State\): goal.steps_per_epoch: "
                                         "Field required"):
        checkpoint.check(resolved(digits, resume_from=full))


class Writer:
    """A trainer's checkpoint interface on rank 0, writing which epoch it saved."""
    rank = 0

    def __init__(self):
        self.loaded_from = None

    def save_state(self, where):
        (where / "model.txt").write_text("saved")

    def load_state(self, where):
        self.loaded_from = where

    def allgather(self, value):
        return [value]


def mark(epoch: int) -> checkpoint.Mark:
    return checkpoint.Mark(epoch, schedule_taken=10 * epoch, goal=goal.Progress(steps_per_epoch=10))


def test_an_interruption_between_the_renames_leaves_the_previous_checkpoint_to_resume(digits, tmp_path,
                                                                                       monkeypatch):
    cfg = resolved(digits, checkpoint_dir=str(tmp_path / "ckpt"))
    trainer = Writer()
    checkpoint.save(cfg, trainer, mark(1), lambda: 5.0)
    renames = []

    def interrupted(src, dst):  # the old checkpoint moved aside, then the run is stopped
        renames.append(src)
        if len(renames) == 2:
            raise KeyboardInterrupt
        return real(src, dst)

    real = checkpoint.os.replace
    monkeypatch.setattr(checkpoint.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(cfg, trainer, mark(2), lambda: 9.0)
    assert not (tmp_path / "ckpt").exists()
    resumed = resolved(digits, resume_from=str(tmp_path / "ckpt"))
    assert checkpoint.check(resumed).epoch == 1
    assert checkpoint.load(resumed, trainer).wall_s == 5.0
    assert trainer.loaded_from == tmp_path / ".ckpt.old"


def test_every_file_is_on_the_disk_before_the_renames_and_the_renames_after(digits, tmp_path, monkeypatch):
    """A rename is atomic, not durable: each file and the fresh folder are synced before it, the parent after."""
    cfg = resolved(digits, checkpoint_dir=str(tmp_path / "ckpt"))
    events = []
    real_fsync, real_replace = checkpoint.os.fsync, checkpoint.os.replace

    def fsync(handle):
        events.append(("fsync", Path(os.readlink(f"/proc/self/fd/{handle}")).name))
        return real_fsync(handle)

    def replace(src, dst):
        events.append(("rename", Path(src).name))
        return real_replace(src, dst)

    monkeypatch.setattr(checkpoint.os, "fsync", fsync)
    monkeypatch.setattr(checkpoint.os, "replace", replace)
    checkpoint.save(cfg, Writer(), mark(1), lambda: 5.0)
    assert events == [("fsync", "model.txt"), ("fsync", checkpoint.STATE), ("fsync", ".ckpt.writing"),
                      ("rename", ".ckpt.writing"), ("fsync", tmp_path.name)]
    events.clear()
    checkpoint.save(cfg, Writer(), mark(2), lambda: 9.0)  # the old one moved aside, then the fresh one in
    assert [e for e in events if e[0] == "rename"] == [("rename", "ckpt"), ("rename", ".ckpt.writing")]
    assert events[-1] == ("fsync", tmp_path.name) and (tmp_path / "ckpt" / "model.txt").read_text() == "saved"


def test_reports_read_past_a_checkpoint_in_the_results_folder(digits, tmp_path):
    from bench.records.collect import load_results

    written(tmp_path, resolved(digits))  # <output>/checkpoints/... holds state.json: not a result, not a warning
    with pytest.raises(BenchError, match="no hvdbench results"):
        load_results([tmp_path], skipped=[])


def test_checkpoints_are_written_after_every_nth_epoch_and_a_stop_for_time_but_not_the_last_or_the_target():
    cfg = type("Config", (), {"checkpoint_every": 2, "epochs": 6})()
    assert [e for e in range(1, 7) if checkpoint.due(cfg, e, None)] == [2, 4]
    assert not checkpoint.due(cfg, 2, "target")
    assert [e for e in range(1, 7) if checkpoint.due(cfg, e, "duration")] == [1, 2, 3, 4, 5]  # the time is up
    assert not checkpoint.due(cfg, 6, "epochs")
    assert not checkpoint.due(type("Config", (), {"checkpoint_every": None, "epochs": 6})(), 3, "duration")


def test_the_folder_defaults_to_one_per_configuration_under_the_output(digits):
    default = checkpoint.folder(resolved(digits, output="out"))
    assert default.parent == Path("out/checkpoints") and re.fullmatch(r"torch-ddp-np2-[0-9a-f]{8}", default.name)
    # how the run is watched or where it writes: the same folder (a resumed run writes where its run wrote)
    assert checkpoint.folder(resolved(digits, output="out", stall_timeout=600.0, loader_workers=1)) == default
    # another configuration in the same output: its own folder, never the other run's checkpoint replaced
    assert checkpoint.folder(resolved(digits, output="out", seed=7)) != default
    assert str(checkpoint.folder(resolved(digits, checkpoint_dir="/mnt/ckpt"))) == "/mnt/ckpt"


def test_a_resumed_record_keeps_the_curve_and_says_from_where(digits, tmp_path):
    cfg = resolved(digits, checkpoint_dir=str(tmp_path / "ckpt"))
    first = goal.Goal(cfg, 64, cfg.steps_per_window)
    first.add(1, 5.0, 0.5, goal.Scores(samples=359, top1=0.5, top5=0.9, loss=1.0, train_loss=1.2), 0.2)
    state = first.record()  # what the checkpoint of epoch 1 holds: written before it says how long it took
    checkpoint.save(cfg, Writer(), checkpoint.Mark(1, 1 + cfg.steps_per_window, state), lambda: 5.3)
    first.checkpointed(1, 0.25, "ckpt")
    assert state.checkpoints == []  # a copy: what the run does after it is not in it
    saved = checkpoint.load(resolved(digits, resume_from=str(tmp_path / "ckpt")), Writer())  # as state.json holds it
    assert [c.epoch for c in saved.goal.curve] == [1] and saved.goal.steps_per_epoch == cfg.steps_per_window
    later = goal.Goal(cfg, 64, cfg.steps_per_window)
    later.restore(saved.goal, Resumed(checkpoint="ckpt", epoch=1, wall_s=saved.wall_s, save_s=0.25,
                                      written_utc=saved.written_utc))
    later.add(2, 9.0, 0.5, goal.Scores(samples=359, top1=0.8, top5=1.0, loss=0.5, train_loss=0.6), 0.1)
    section = goal.section(cfg, [samples.rank(0, goal=later.record())], init_s=3.0)
    assert [c.epoch for c in section.curve] == [1, 2] and section.curve[0].eval_loss == 1.0
    assert section.resumed[0].epoch == 1
    assert section.checkpoints == first.progress.checkpoints
    assert section.checkpoint_s_total == 0.25
    training = Training.model_validate(section.model_dump(mode="json", by_alias=True, exclude_unset=True))
    rows = {label: (value, detail) for label, value, detail in goal.table_rows(training)}
    assert rows["resumed"][0] == "epoch 1" and "5.3 s of training before it, counted once" in rows["resumed"][1]
    assert rows["resumed"][1].startswith("from ckpt ")  # the record's "from", an alias of the model's field
    assert training.model_dump(by_alias=True, exclude_unset=True)["resumed"][0]["from"] == "ckpt"


def test_the_lost_rank_fault_is_the_last_rank_after_that_epochs_checkpoint(monkeypatch):
    import os

    exits = []
    monkeypatch.setattr(os, "_exit", exits.append)
    hooks = Hooks(lost_after_checkpoint=2)
    for rank, epoch in ((1, 1), (0, 2), (1, 2)):
        hooks.checkpointed(type("T", (), {"rank": rank, "world_size": 2})(), epoch)
    assert exits == [9]
