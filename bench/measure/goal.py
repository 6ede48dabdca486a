"""Training to a goal (``--epochs``, ``--target-accuracy``): the learning-rate schedule, the evaluations on the
held-out split, and the ``training`` section of the result. Framework-free: the trainers evaluate (``evaluate``)
and set the rate (``set_learning_rate``); the loop (bench.measure.loop) asks here when.

Epochs. With ``--epochs E`` every timed window is one epoch of the rank's shard (``steps_per_window`` = the
shard's whole batches, the same on every rank: bench.data.datasets.shard) and there are E windows, no warmup
steps. The run's first step (its init, synchronised) draws the first batch, so the evaluation after window k has
seen ``k`` epochs and one batch; ``samples`` in the curve says exactly how many.

Learning rate, per step ``s`` (an epoch has ``S`` steps, ``E`` epochs in all, ``W`` warmup epochs)::

    peak   = base_lr x global batch / 256            (Goyal et al. 2017's linear scaling rule; --lr-scaling none:
                                                      base_lr itself)

The global batch is the batch one update applies: every rank's together under data-parallel training, one
worker's under tf-native ``--strategy ps`` (asynchronous: each worker's closure updates the parameter servers
with its own batch; scaled by the workers' sum its rate was twice too high at 2 workers and stayed below 0.76 on
the digits where every other mode reaches 0.95). An epoch is ``S`` steps of one closure per worker there.
    warmup = peak x (s + 1) / (W x S)                 while s < W x S (linear, from peak / (W x S))
    W      = --warmup-epochs, or by default under linear scaling min(log2(global batch / 256), 5, E / 4) for a
             global batch past 256 (one epoch per doubling: Goyal et al.'s 5 epochs at 8k), else 0
    cosine = peak x (1 + cos(pi x t)) / 2             t = (s - W x S) / ((E - W) x S), after the warmup
    step   = peak x 0.1 ^ (number of 50 %, 75 % marks of the E epochs passed)   (He et al.'s CIFAR schedule)
    none   = peak

Evaluation: every ``--eval-every`` epochs and after the last, every rank scores its part of the held-out split
(sample i goes to rank i mod W: each sample once, none dropped), in eval mode with no gradient; the ranks' counts
are summed (an allgather), so every rank sees the same accuracy and stops at the same evaluation::

    top1 = samples whose highest logit is the label / samples        top5: the label among the five highest
    loss = mean cross-entropy over the held-out samples (label smoothing not applied)

Times: ``wall_s`` of an evaluation is from the end of init to the end of that evaluation on rank 0 (the
evaluations and checkpoints before it included: they are part of training to a target, as in MLPerf's time to
train; a resumed run adds its checkpoint's wall time, bench.measure.checkpoint), so
``time_to_target_s`` is the wall time of training to the target and init stays apart (``init_s``); the window
times (throughput) exclude the evaluations; ``eval_s`` keeps each evaluation's own time.

A fixed-time run (``--duration S`` with ``--epochs E``): the run stops after the first epoch whose end is at or
past S seconds of that wall time on any rank, evaluates that epoch, and records ``stopped: duration``; E is still
the schedule's length (the rate decays over E epochs), as in a fixed-time comparison of how far each configuration
got.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bench.errors import BenchError
from bench.typed import Open

if TYPE_CHECKING:
    from bench.measure.raw import RankRecord


class EvalPoint(Open):
    """One evaluation on the held-out split (bench.measure.goal)."""
    epoch: int
    samples: int = Field(description="training samples seen by every rank together when it was taken")
    wall_s: float = Field(description="from the end of init to the end of this evaluation, rank 0")
    eval_s: float
    top1: float
    top5: float
    learning_rate: float | None = Field(None, description="the rate of the epoch's last step")
    eval_loss: float | None = Field(None, description="mean cross-entropy over the held-out samples")
    eval_samples: int | None = Field(None, description="the held-out samples scored")
    train_loss: float | None = Field(None, description="the ranks' mean training loss since the last evaluation")


class Checkpoint(Open):
    """One checkpoint written (bench.measure.checkpoint)."""
    epoch: int
    save_s: float = Field(description="rank 0's time to write it, inside the training wall time")
    path: str


class Resumed(Open):
    """The checkpoint a resumed run continued from (bench.measure.checkpoint)."""
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    epoch: int = Field(description="the epochs the checkpoint holds")
    checkpoint: str | None = Field(None, alias="from", description="the checkpoint's folder")
    wall_s: float = Field(description="training wall time up to the checkpoint, counted once")
    save_s: float | None = Field(None, description="the checkpoint's own time to write")
    written_utc: str


class Training(Open):
    """Training to a goal (--epochs, --target-accuracy): the curve and the time to the target."""
    target_accuracy: float | None
    reached: bool | None
    time_to_target_s: float | None
    epochs_to_target: int | None
    curve: list[EvalPoint]
    stopped: Literal["target", "duration", "epochs"] | None = Field(None, description="why the run ended")
    checkpoints: list[Checkpoint] = Field([], description="every checkpoint written (a resumed run: its "
                                          "checkpoint's and those before it too)")
    resumed: list[Resumed] | None = Field(None, description="--resume-from: the checkpoints this run continued from")
    time_to_target_with_init_s: float | None = None
    samples_to_target: int | None = None
    not_reached: str | None = Field(None, description="why the target was not reached")
    epochs_run: int | None = None
    duration_s: float | None = None
    final_top1: float | None = None
    final_top5: float | None = None
    eval_s_total: float = 0.0
    checkpoint_s_total: float = 0.0
    steps_per_epoch: int | None = None
    schedule: dict[str, Any] | None = Field(None, description="the learning-rate schedule and optimizer it trained "
                                            "with (bench.measure.goal)")
    definition: str

DECAYS = ("cosine", "step", "none")
OPTIMIZERS = ("sgd", "adagrad")
ADAGRAD_EPS = 1e-8  # fbgemm's fused Adagrad's; PyTorch's and Keras's Adagrad are given the same
SCALINGS = ("linear", "none")
REFERENCE_BATCH = 256  # the global batch base_lr is given for
BASE_LR = 0.1  # ResNet's rate for a batch of 256 (He et al. 2016; Goyal et al. 2017)
WEIGHT_DECAY = 1e-4  # ResNet's, on ImageNet and CIFAR-10
MAX_WARMUP_EPOCHS = 5.0  # the default warmup's longest (Goyal et al. 2017's gradual warmup, at a global batch of 8k)


def active(cfg) -> bool:
    """Whether the run trains to a goal (``--epochs``): epochs as windows, evaluations, the schedule."""
    return cfg.epochs is not None


def peak_rate(cfg, global_batch: int) -> float:
    base = cfg.base_lr if cfg.base_lr is not None else BASE_LR
    return base * global_batch / REFERENCE_BATCH if cfg.lr_scaling == "linear" else base


def warmup_epochs(cfg, global_batch: int) -> float:
    """The warmup's length in epochs (module docstring: W): the user's, or the default that grows with the global
    batch where the rate is scaled linearly with it."""
    if cfg.warmup_epochs is not None:
        return cfg.warmup_epochs
    if cfg.lr_scaling != "linear" or global_batch <= REFERENCE_BATCH:
        return 0.0
    return round(min(math.log2(global_batch / REFERENCE_BATCH), MAX_WARMUP_EPOCHS, cfg.epochs / 4), 2)


def async_momentum(momentum: float, workers: int) -> float:
    """The optimizer's momentum for ``workers`` asynchronous workers (tf-native ``--strategy ps``): asynchrony
    itself acts as momentum of about 1 - 1/W (each update lands on parameters that about W - 1 others moved since
    its gradient was taken: Mitliagkas et al., "Asynchrony begets momentum, with an application to deep
    learning", 2016), so the optimizer's own is lowered by as much, never below 0: 0.9 at one worker, 0.4 at two,
    0 from ten. Measured on the digits (docs/measured/2026-11-26-ps-momentum.md): two workers with 0.9 reached
    95% in 0 of 3 runs, with 0.8 in 2, with 0.5, 0.4 or 0 in every run."""
    return max(0.0, momentum - (1.0 - 1.0 / workers))


class Schedule:
    """The rate at each step (module docstring)."""

    def __init__(self, cfg, steps_per_epoch: int) -> None:
        self.peak = cfg.learning_rate
        self.steps = steps_per_epoch * cfg.epochs
        self.warmup = round(cfg.warmup_epochs * steps_per_epoch)
        self.decay = cfg.lr_decay
        self.marks = (round(0.5 * self.steps), round(0.75 * self.steps))
        self.taken = 0  # steps taken so far
        self.current = self.peak

    def next(self) -> float:
        """The rate of the next step (and count it)."""
        self.current = self.rate(self.taken)
        self.taken += 1
        return self.current

    def rate(self, step: int) -> float:
        if step < self.warmup:
            return self.peak * (step + 1) / self.warmup
        if self.decay == "cosine":
            t = (step - self.warmup) / max(1, self.steps - self.warmup)
            return self.peak * (1 + math.cos(math.pi * min(1.0, t))) / 2
        if self.decay == "step":
            return self.peak * 0.1 ** sum(step >= m for m in self.marks)
        return self.peak


@dataclass
class Counts:
    """One rank's evaluation counts (each mode's ``evaluate_shard`` adds a held-out batch's to them; the
    allgather pickles them; :func:`reduce_counts` sums every rank's)."""
    samples: int = 0
    correct1: int = 0  # the label is the highest logit
    correct5: int = 0  # the label is among the five highest
    loss_sum: float = 0.0  # cross-entropy summed over the samples
    train_loss: float | None = None  # the mean of the rank's training losses since the last evaluation


@dataclass(frozen=True)
class Scores:
    """An evaluation: every rank's counts summed (module docstring)."""
    samples: int
    top1: float
    top5: float
    loss: float
    train_loss: float | None


def reduce_counts(parts: list[Counts]) -> Scores:
    """Every rank's evaluation counts summed: the held-out split's accuracy (module docstring); the training loss
    since the last evaluation, averaged over the ranks (each rank's: the mean of its steps' losses)."""
    n = sum(p.samples for p in parts)
    if n == 0:
        raise BenchError("the held-out split gave no sample to evaluate")
    losses = [p.train_loss for p in parts if p.train_loss is not None]
    return Scores(samples=int(n), top1=sum(p.correct1 for p in parts) / n, top5=sum(p.correct5 for p in parts) / n,
                  loss=sum(p.loss_sum for p in parts) / n, train_loss=sum(losses) / len(losses) if losses else None)


class Progress(BaseModel):
    """One rank's record of training to the goal: the evaluations, the checkpoints, why it stopped. Rank 0's is the
    result's ``training`` section's source (:func:`section`), and each checkpoint holds the one of its epoch
    (bench.measure.checkpoint)."""
    steps_per_epoch: int
    curve: list[EvalPoint] = []
    reached_at: int | None = None  # index in the curve
    checkpoints: list[Checkpoint] = []  # bench.measure.checkpoint: each one written
    resumed: list[Resumed] | None = None  # --resume-from: the checkpoints this run continued from
    stopped: Literal["target", "duration", "epochs"] | None = None  # why the run ended


class Goal:
    """One rank's record of training to the goal: when to evaluate, the curve, whether to stop."""

    def __init__(self, cfg, global_batch: int, steps_per_epoch: int) -> None:
        self.cfg, self.global_batch = cfg, global_batch
        self.progress = Progress(steps_per_epoch=steps_per_epoch)

    def due(self, epoch: int) -> bool:
        """Whether to evaluate after ``epoch``: every --eval-every epochs, and after the last."""
        return epoch % self.cfg.eval_every == 0 or epoch == self.cfg.epochs

    def add(self, epoch: int, wall_s: float, eval_s: float, scores: Scores, rate: float) -> bool:
        """Keep an evaluation; True when it is the first at the target (the run stops there unless
        --all-epochs)."""
        progress = self.progress
        progress.curve.append(EvalPoint(
            epoch=epoch, samples=self.global_batch * (epoch * progress.steps_per_epoch + 1), wall_s=wall_s,
            eval_s=eval_s, learning_rate=rate, top1=scores.top1, top5=scores.top5, eval_loss=scores.loss,
            eval_samples=scores.samples, train_loss=scores.train_loss))
        target = self.cfg.target_accuracy
        if target is not None and progress.reached_at is None and scores.top1 >= target:
            progress.reached_at = len(progress.curve) - 1
            return True
        return False

    def checkpointed(self, epoch: int, save_s: float, path: str) -> None:
        self.progress.checkpoints.append(Checkpoint(epoch=epoch, save_s=save_s, path=path))

    def restore(self, saved: Progress, resumed: Resumed) -> None:
        """Go on from a checkpoint's record (bench.measure.checkpoint): its evaluations and checkpoints, and the
        checkpoint itself."""
        self.progress = saved.model_copy(update={
            "checkpoints": [*saved.checkpoints, Checkpoint(epoch=resumed.epoch, save_s=resumed.save_s or 0.0,
                                                           path=resumed.checkpoint or "")],
            "resumed": [*(saved.resumed or []), resumed]})

    def record(self) -> Progress:
        """What the rank hands rank 0, or a checkpoint holds: a copy, later evaluations not in it."""
        return self.progress.model_copy(deep=True)


def section(cfg, ranks: list[RankRecord], init_s: float) -> Training | None:
    """The result's ``training`` section from rank 0's goal record (every rank's curve is the same: the
    accuracies are reduced across ranks), or None for a run that did not train to a goal."""
    goal = ranks[0].goal
    if goal is None:
        return None
    curve, at = goal.curve, goal.reached_at
    target = cfg.target_accuracy
    reached = at is not None
    best = max((c.top1 for c in curve), default=None)
    why = None
    if target is not None and not reached:
        why = (f"top-1 {best:.4f} at best after {curve[-1].epoch} epoch(s), below the target {target}"
               if curve else "no evaluation ran")
    last = curve[-1] if curve else None
    hit = curve[at] if at is not None else None
    return Training(
        target_accuracy=target,
        reached=reached if target is not None else None,
        time_to_target_s=hit.wall_s if hit else None,
        time_to_target_with_init_s=init_s + hit.wall_s if hit else None,
        epochs_to_target=hit.epoch if hit else None,
        samples_to_target=hit.samples if hit else None,
        not_reached=why,
        epochs_run=last.epoch if last else None,
        stopped=goal.stopped,
        duration_s=cfg.duration,
        final_top1=last.top1 if last else None,
        final_top5=last.top5 if last else None,
        eval_s_total=sum(c.eval_s for c in curve),
        checkpoints=goal.checkpoints,
        checkpoint_s_total=sum(c.save_s for c in goal.checkpoints),
        resumed=goal.resumed,
        steps_per_epoch=goal.steps_per_epoch,
        schedule={"base_lr": cfg.base_lr if cfg.base_lr is not None else BASE_LR, "lr_scaling": cfg.lr_scaling,
                  "peak_lr": cfg.learning_rate, "warmup_epochs": cfg.warmup_epochs, "decay": cfg.lr_decay,
                  "weight_decay": cfg.weight_decay, "label_smoothing": cfg.label_smoothing,
                  "optimizer": cfg.optimizer, "momentum": cfg.momentum if cfg.optimizer == "sgd" else None},
        curve=curve,
        definition="curve: one point per evaluation on the held-out split (top-1/top-5 summed over every rank's "
                   "part); wall_s from the end of init to the end of that evaluation, earlier evaluations included; "
                   "time_to_target_s: wall_s of the first evaluation at or above target_accuracy, init apart "
                   "(bench.measure.goal)",
    )


def table_rows(training: Training | None) -> list[tuple[str, str, str]]:
    """The terminal table's rows for a result's ``training`` section: the target and when it was reached, the
    final accuracy, what the evaluations cost."""
    if training is None:
        return []
    rows = [("held-out top-1 / top-5, last", f"{training.final_top1:.4f} / {training.final_top5:.4f}",
             f"after {training.epochs_run} epoch(s)")]
    if training.target_accuracy is not None:
        if training.reached:
            rows.append(("time to target", f"{training.time_to_target_s:.1f}",
                         f"s after init (+ init: {training.time_to_target_with_init_s:.1f} s); top-1 >= "
                         f"{training.target_accuracy} at epoch {training.epochs_to_target}"))
        else:
            rows.append(("time to target", "NOT REACHED", training.not_reached or ""))
    rows.append(("evaluations", f"{training.eval_s_total:.1f}", f"s in {len(training.curve)} evaluation(s), "
                 "outside the timed windows"))
    if training.stopped == "duration":
        rows.append(("stopped", "time up", f"--duration {training.duration_s:g} s: after epoch "
                     f"{training.epochs_run} of {training.curve[-1].wall_s:.1f} s"))
    if training.checkpoints:
        rows.append(("checkpoints", f"{training.checkpoint_s_total:.2f}",
                     f"s in {len(training.checkpoints)} checkpoint(s), in the training time; last: "
                     f"{training.checkpoints[-1].path}"))
    for r in training.resumed or []:
        rows.append(("resumed", f"epoch {r.epoch}", f"from {r.checkpoint} ({r.wall_s:.1f} s of training "
                     "before it, counted once)"))
    return rows
