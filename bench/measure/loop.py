"""The experiment every mode runs: one measurement loop, shared by all frameworks.

Per rank::

    t_start (process start, from /proc)  -> trainer.setup()   (imports, rendezvous, model, data)
      -> first step, synchronised          } init_s = end of first step - t_start
                                              (--compile compile here: compile_s, bench.records.results)
      -> warmup_steps steps, each timed     } kept out of the headline figures, reported apart
      -> windows of steps_per_window steps, each window bounded by trainer.sync()
      -> parameter checksum, allgather of every rank's samples -> rank 0 writes the result

      -> per-rank attribution windows, compute only and exchange only (bench.measure.attribution), outside every
         headline figure and after the checksum

``train_s`` is the wall time from the end of init to the end of the last window (warmup included),
so ``init_s + train_s`` is the rank's wall time to a trained model (seed 003's two views).
With ``--duration S`` windows run until S seconds of windows have elapsed on the slowest rank
(agreed through an allgather after each window, outside the timed region).
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any, Protocol

from bench.config import RunConfig
from bench.hooks import Hooks
from bench.launching.detect import LaunchInfo
from bench.measure import checkpoint, goal, host_load
from bench.measure.builtin_trackers import trackers
from bench.measure.goal import Checkpoint, EvalPoint, Resumed
from bench.measure.raw import Gathered, RankRecord
from bench.measure.tracker import Context, Tracker
from bench.measure.watchdog import Watchdog
from bench.models import model


class Trainer(Protocol):
    """What a mode provides; the runner owns every timing decision."""
    rank: int
    world_size: int
    replicas_per_process: int  # devices (or PS workers) this process's steps cover

    def setup(self) -> None: ...
    def step(self) -> None: ...
    def sync(self) -> None: ...
    def allgather(self, obj: Any) -> list[Any]: ...
    def checksum(self) -> str: ...
    def fingerprint(self) -> float: ...
    def environment(self) -> dict[str, Any]: ...
    def device_label(self) -> str: ...
    def teardown(self) -> None: ...
    def sync_report(self) -> dict[str, Any] | None: ...
    def own_gpus(self) -> list[int]: ...
    # Optional (bench.measure.attribution): attribution_unsupported() -> str | None, compute_step(), exchange().


def measuring(trainer: Trainer) -> int:
    """The processes that measure, each for ``replicas_per_process`` replicas: every rank, or tf-native ps's one
    coordinator (for all its workers)."""
    return getattr(trainer, "measuring_processes", trainer.world_size)


def process_start_time() -> float:
    """Epoch seconds at which this process started (Linux /proc), else now."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(host_load.stat_fields(f.read())[19])  # starttime, the 22nd field
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return btime + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def measure(trainer: Trainer, cfg: RunConfig, launch: LaunchInfo, progress=None, hooks: Hooks | None = None,
            run_id: str | None = None) -> Gathered | None:
    """Run the experiment on this rank; return every rank's raw record, gathered, on rank 0, None elsewhere.

    Every registered tracker this run wants measures beside the skeleton, at its points (bench.measure.tracker).
    ``hooks`` (bench.hooks): bench verify's parameter snapshots, "initial" after set-up and "final" after the last
    window; the slow-rank fault. ``run_id``: this process's (rank 0's is the one the result is written under).
    """
    t_start = process_start_time()
    trainer.setup()
    dog = Watchdog(trainer.rank, cfg.stall_timeout, cfg.rendezvous_timeout)
    ctx = Context(cfg=cfg, trainer=trainer, launch=launch, dog=dog, hooks=hooks or Hooks(), run_id=run_id)
    running = Running([t(ctx) for t in trackers() if t.wanted(ctx)])
    dog.start()
    try:
        return _measure(ctx, progress, t_start, running)
    finally:
        try:
            running.stop()
        finally:
            dog.stop()


class Running:
    """The trackers of one rank's run, called together at each point (bench.measure.tracker) in their order."""

    def __init__(self, active: list[Tracker]) -> None:
        self.active = active
        self.finished = False

    def __getattr__(self, point: str):
        def call() -> None:
            for tracker in self.active:
                getattr(tracker, point)()
        return call

    def stop(self) -> None:
        """The trackers' ``finished``, once, however the run ended (a thread of theirs is stopped)."""
        if not self.finished:
            self.finished = True
            for tracker in self.active:
                tracker.finished()

    def parts(self) -> dict[str, Any]:
        return {tracker.name: tracker.part() for tracker in self.active}


def _measure(ctx: Context, progress, t_start: float, running: Running) -> Gathered | None:
    """The timing skeleton (module docstring), the trackers called at its points."""
    trainer, cfg = ctx.trainer, ctx.cfg
    ctx.hooks.snapshot(trainer, "initial")
    run = Skeleton(ctx, progress)
    initial = trainer.fingerprint()  # a float64 sum of the parameters: cheap, proves training moved them
    t_setup = time.time()
    running.started()
    trainer.sync()
    t0 = time.perf_counter()
    run.step()
    trainer.sync()
    first_step_s = time.perf_counter() - t0
    running.first_step_done()
    run.after_first_step()
    t_init_end = run.t_init_end = time.time()
    ctx.dog.first_step_done(first_step_s, cfg.steps_per_window)
    if progress is not None:
        progress.start(cfg.warmup_steps + cfg.steps_per_window * cfg.windows if cfg.duration is None else None)
    warmup_s = run.warmup()
    run.settle()
    running.before_windows()  # before the barrier that starts window 1: no rank enters it later by a reading's time
    run.windows(running)
    t_end = time.time()
    running.after_windows()
    ctx.hooks.snapshot(trainer, "final")
    checksum, final = trainer.checksum(), trainer.fingerprint()  # before the trackers' own steps move them
    if progress is not None:
        progress.stop()
    running.after_checksum()  # steps of their own (--trace, the attribution), outside every headline figure
    running.stop()
    record = RankRecord(
        rank=trainer.rank, local_rank=ctx.launch.local_rank, host=socket.gethostname(), device=trainer.device_label(),
        setup_s=t_setup - t_start, first_step_s=first_step_s, init_s=t_init_end - t_start, train_s=t_end - t_init_end,
        warmup_step_s=warmup_s, window_s=ctx.window_s, checksum=checksum, param_sum_initial=initial,
        param_sum_final=final, replicas=trainer.replicas_per_process, sync_report=trainer.sync_report(),
        goal=run.goal.record() if run.goal is not None else None, parts=running.parts())
    ctx.dog.at("gather")
    gathered = trainer.allgather(record)
    if trainer.rank != 0:
        return None
    return Gathered(ranks=sorted(gathered, key=lambda r: r.rank), environment=trainer.environment(),
                    t_start=t_start, run_id=ctx.run_id)


class Skeleton:
    """One rank's steps after the first: warmup, settling, the timed windows, and (--epochs) the evaluations and
    checkpoints between them, which decide when the windows stop."""

    def __init__(self, ctx: Context, progress) -> None:
        self.ctx, self.progress = ctx, progress
        trainer, cfg = ctx.trainer, ctx.cfg
        self.step = ctx.hooks.slowed(trainer.rank, trainer.step, trainer.sync)
        self.goal = self.schedule = None
        if goal.active(cfg):  # --epochs: each window one epoch, evaluations, the rate set per step
            self.goal = goal.Goal(cfg, cfg.batch_size * trainer.replicas_per_process * measuring(trainer),
                                  cfg.steps_per_window)
            self.schedule = goal.Schedule(cfg, cfg.steps_per_window)
            self.step = scheduled(self.step, trainer, self.schedule)
        self.log: WindowLog | None = None
        self.epochs_before, self.wall_before, self.t_init_end = 0, 0.0, 0.0

    def after_first_step(self) -> None:
        """--resume-from: the checkpoint's state over the first step's update (the first step traces and warms up;
        bench.measure.checkpoint); then rank 0's progress lines start where no progress bar shows them."""
        ctx = self.ctx
        if ctx.cfg.resume_from:
            state = resume(ctx.cfg, ctx.trainer, self.schedule, self.goal)
            self.epochs_before, self.wall_before = state.epoch, state.wall_s
        if self.progress is None and ctx.trainer.rank == 0:
            self.log = WindowLog(ctx.cfg, ctx.trainer)
            self.log.before = self.epochs_before

    def wall_s(self) -> float:
        """Training wall time so far: before the checkpoint this run resumed from, and since this run's init."""
        return self.wall_before + time.time() - self.t_init_end

    def warmup(self) -> list[float]:
        """The warmup steps, each timed (kept out of the headline)."""
        cfg, dog, trainer = self.ctx.cfg, self.ctx.dog, self.ctx.trainer
        warmup_s = []
        for i in range(cfg.warmup_steps):
            dog.at("warmup", 0, i)
            t0 = time.perf_counter()
            self.step()
            trainer.sync()
            warmup_s.append(time.perf_counter() - t0)
            if i == 0 and cfg.compiles:  # a compiled first step is mostly compilation: the stall bound from
                dog.first_step_done(warmup_s[0], cfg.steps_per_window)  # a compiled step instead
            dog.progress()
            if self.progress is not None:
                self.progress.advance()
        return warmup_s

    def settle(self) -> None:
        """--data: untimed steps until every rank's input queue is full or empty (bench.data.feed); none when
        training to a goal: every step there trains and its windows are its epochs (bench.measure.goal)."""
        trainer, dog = self.ctx.trainer, self.ctx.dog
        feed = getattr(trainer, "feed", None)
        if feed is None:
            return
        settle, limit = 0, 0 if self.goal is not None else feed.settle_limit()
        while settle < limit and not all(trainer.allgather(feed.steady())):
            dog.at("warmup", 0, self.ctx.cfg.warmup_steps + settle)
            self.step()
            trainer.sync()
            settle += 1
            dog.progress()
        feed.started(settle)

    def windows(self, running: Running) -> None:
        """The timed windows, each bounded by the device's sync, until the windows, the duration or the goal say
        stop; the trackers read at each window's edges, outside its clock."""
        cfg, trainer, dog, window_s = self.ctx.cfg, self.ctx.trainer, self.ctx.dog, self.ctx.window_s
        timed = 0.0
        while True:
            trainer.sync()
            if not window_s:
                running.windows_open()
            running.before_window()
            t0 = time.perf_counter()
            for i in range(cfg.steps_per_window):
                dog.at("window", len(window_s) + 1, i)
                self.step()
                if self.progress is not None:
                    self.progress.advance()
            trainer.sync()
            dt = time.perf_counter() - t0
            window_s.append(dt)
            timed += dt
            running.after_window()  # outside the clock: the window's device events have passed
            dog.progress()
            if self.log is not None:
                self.log.window(window_s)
            epoch = self.epochs_before + len(window_s)
            if self.goal is not None:
                if self.evaluate(epoch) or epoch >= cfg.windows:
                    return
            elif cfg.duration is None:
                if epoch >= cfg.windows:
                    return
            elif max(trainer.allgather(timed)) >= cfg.duration:
                return

    def evaluate(self, epoch: int) -> bool:
        """--epochs: after epoch ``epoch``, the evaluation when one is due and the checkpoint when one is; True to
        stop (the target reached with --stop-at-target, or --duration's time up after the epoch that ended past it:
        training wall time, every rank's clock, bench.measure.goal)."""
        cfg, trainer, dog, tracker = self.ctx.cfg, self.ctx.trainer, self.ctx.dog, self.goal
        out_of_time = cfg.duration is not None and max(trainer.allgather(self.wall_s())) >= cfg.duration
        if not (tracker.due(epoch) or out_of_time):
            return False
        dog.at("evaluate", epoch)
        t0 = time.perf_counter()
        scores = goal.reduce_counts(trainer.allgather(trainer.evaluate_shard()))
        reached = tracker.add(epoch, self.wall_s(), time.perf_counter() - t0, scores, self.schedule.current)
        dog.progress()
        if self.log is not None:
            self.log.evaluation(tracker.progress.curve[-1])
        stopping = (reached and cfg.stop_at_target) or out_of_time
        tracker.progress.stopped = "target" if reached and cfg.stop_at_target else "duration" if out_of_time else \
            "epochs" if epoch >= cfg.windows else None
        if checkpoint.due(cfg, epoch, tracker.progress.stopped):
            dog.at("checkpoint", epoch)
            saved_s = checkpoint.save(cfg, trainer, checkpoint.Mark(epoch, self.schedule.taken, tracker.record()),
                                      self.wall_s)
            tracker.checkpointed(epoch, saved_s, str(checkpoint.folder(cfg)))
            self.ctx.hooks.checkpointed(trainer, epoch)
            dog.progress()
            if self.log is not None:
                self.log.checkpoint(tracker.progress.checkpoints[-1])
        return stopping


def resume(cfg: RunConfig, trainer: Trainer, schedule: goal.Schedule, tracker: goal.Goal) -> checkpoint.State:
    """Continue from the checkpoint in ``cfg.resume_from`` (bench.measure.checkpoint): the model and the optimizer, the
    schedule's place, the evaluations so far, and the feed past the batches already trained on."""
    state = checkpoint.load(cfg, trainer)
    schedule.taken = state.schedule_taken
    tracker.restore(state.goal, Resumed(checkpoint=str(cfg.resume_from), epoch=state.epoch, wall_s=state.wall_s,
                                        save_s=state.save_s, written_utc=state.written_utc))
    trainer.feed.seek(schedule.taken)
    trainer.sync()
    return state


def scheduled(step, trainer: Trainer, schedule: goal.Schedule):
    """``step`` with the learning rate of its place in the schedule set before it (bench.measure.goal)."""
    def run() -> None:
        trainer.set_learning_rate(schedule.next())
        step()
    return run


class WindowLog:
    """Rank 0's plain progress lines on stderr when it is not a terminal (Slurm logs, CI): one when the
    ranks have started, then one per timed window with its throughput and the running mean (all ranks)."""

    def __init__(self, cfg: RunConfig, trainer: Trainer) -> None:
        import sys

        self.file = sys.stderr
        self.symbol = model(cfg.model).workload.symbol
        processes = measuring(trainer)
        self.samples = cfg.batch_size * cfg.steps_per_window * trainer.replicas_per_process * processes
        self.total = None if cfg.duration is not None else cfg.windows
        self.before = 0  # windows of the run this one resumed (--resume-from)
        print(f"{cfg.mode}: ranks started, {trainer.replicas_per_process * processes} replica(s); {cfg.model}, "
              f"batch {cfg.batch_size}/device, first step done", file=self.file, flush=True)

    def evaluation(self, point: EvalPoint) -> None:
        print(f"epoch {point.epoch}: held-out top-1 {point.top1:.4f}, top-5 {point.top5:.4f}, loss "
              f"{point.eval_loss:.4f} ({point.eval_s:.1f} s), {point.wall_s:.1f} s after init",
              file=self.file, flush=True)

    def checkpoint(self, saved: Checkpoint) -> None:
        print(f"epoch {saved.epoch}: checkpoint written to {saved.path} ({saved.save_s:.1f} s); "
              f"--resume-from {saved.path} continues from here", file=self.file, flush=True)

    def window(self, window_s: list[float]) -> None:
        n = len(window_s)
        of = f"/{self.total}" if self.total else ""
        print(f"window {self.before + n}{of}: {self.samples / window_s[-1]:.2f} {self.symbol} (rank 0's clock x "
              f"world), running {self.samples * n / sum(window_s):.2f} {self.symbol}", file=self.file, flush=True)
