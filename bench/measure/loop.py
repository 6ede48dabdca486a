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
from bench.measure import attribution, checkpoint, goal, host_load, trace, traffic
from bench.measure.raw import Gathered, RankRecord
from bench.measure.telemetry import Sampled
from bench.measure.watchdog import Watchdog
from bench.models import model
from bench.modes import mode
from bench.records.header import new_run_id
from bench.records.schema import Checkpoint, EvalPoint, Resumed


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


def measure(trainer: Trainer, cfg: RunConfig, launch: LaunchInfo, progress=None, sampler=None,
            hooks: Hooks | None = None) -> Gathered | None:
    """Run the experiment on this rank; return every rank's raw record, gathered, on rank 0, None elsewhere.

    ``sampler`` (bench.measure.telemetry.Sampler, in every process: the GPUs it drives) runs from set-up to the end and
    reads the energy counters exactly when the timed windows start and end. ``hooks`` (bench.hooks): bench
    verify's parameter snapshots, "initial" after set-up and "final" after the last window; the slow-rank fault.
    """
    t_start = process_start_time()
    trainer.setup()
    dog = Watchdog(trainer.rank, cfg.stall_timeout, cfg.rendezvous_timeout)
    dog.start()
    try:
        return _measure(trainer, cfg, launch, progress, sampler, hooks or Hooks(), t_start, dog)
    finally:
        dog.stop()


def _measure(trainer: Trainer, cfg: RunConfig, launch: LaunchInfo, progress, sampler, hooks: Hooks,
             t_start: float, dog: Watchdog) -> Gathered | None:
    hooks.snapshot(trainer, "initial")
    step = hooks.slowed(trainer.rank, trainer.step, trainer.sync)
    tracker = schedule = None
    if goal.active(cfg):  # --epochs: each window one epoch, evaluations, the rate set per step
        tracker = goal.Goal(cfg, cfg.batch_size * trainer.replicas_per_process * measuring(trainer),
                            cfg.steps_per_window)
        schedule = goal.Schedule(cfg, cfg.steps_per_window)
        step = scheduled(step, trainer, schedule)
    initial = trainer.fingerprint()  # a float64 sum of the parameters: cheap, proves training moved them
    t_setup = time.time()
    if sampler is not None:
        sampler.start()

    # --compile, --xla: graphs compiled so far (a counter of the compiler's), read again after the first step, before
    # the windows and after them: the first step compiles, and a graph compiled later was timed or moved compile_s
    graphs = getattr(trainer, "compiled_graphs", None) or (lambda: None)
    graphs_at_start = graphs()
    trainer.sync()
    t0 = time.perf_counter()
    step()
    trainer.sync()
    first_step_s = time.perf_counter() - t0
    graphs_after_first = graphs()
    # --resume-from: after the first step (it traces and warms up), whose update the checkpoint then replaces
    resumed = resume(cfg, trainer, schedule, tracker) if cfg.resume_from else None
    epochs_before = resumed.epoch if resumed else 0
    wall_before = resumed.wall_s if resumed else 0.0
    t_init_end = time.time()

    def wall_s() -> float:
        """Training wall time so far: before the checkpoint this run resumed from, and since this run's init."""
        return wall_before + time.time() - t_init_end
    dog.first_step_done(first_step_s, cfg.steps_per_window)
    compiling = graphs_at_start is not None
    log = WindowLog(cfg, trainer) if progress is None and trainer.rank == 0 else None
    if log is not None:
        log.before = epochs_before

    total_steps = cfg.warmup_steps + cfg.steps_per_window * cfg.windows
    if progress is not None:
        progress.start(total_steps if cfg.duration is None else None)

    warmup_s = []
    for i in range(cfg.warmup_steps):
        dog.at("warmup", 0, i)
        t0 = time.perf_counter()
        step()
        trainer.sync()
        warmup_s.append(time.perf_counter() - t0)
        if i == 0 and compiling:  # a compiled first step is mostly compilation: the stall bound from
            dog.first_step_done(warmup_s[0], cfg.steps_per_window)  # a compiled step instead
        dog.progress()
        if progress is not None:
            progress.advance()
    feed = getattr(trainer, "feed", None)  # --data: the rank's batches, each draw timed (bench.data.feed)
    if feed is not None:  # untimed steps until every rank's input queue is full or empty (bench.data.feed);
        # none when training to a goal: every step there trains and its windows are its epochs (bench.measure.goal)
        settle, limit = 0, 0 if tracker is not None else feed.settle_limit()
        while settle < limit and not all(trainer.allgather(feed.steady())):
            dog.at("warmup", 0, cfg.warmup_steps + settle)
            step()
            trainer.sync()
            settle += 1
            dog.progress()
        feed.started(settle)
    graphs_before = graphs()

    window_s: list[float] = []
    timed = 0.0
    # graphs compiled inside the windows' clocks alone: an evaluation between two windows compiles its own (eval
    # mode, no gradients), outside them
    in_windows = 0
    net_before = load_before = None
    timed_from = feed.mark() if feed is not None else 0
    while True:
        if not window_s:
            # before the barrier that starts window 1, so that no rank enters it later by its readings' time
            if launch.local_rank == 0:  # one reading per host (bench.measure.traffic)
                net_before = traffic.tx_bytes()
            load_before = host_load.reading(host=launch.local_rank == 0)
        trainer.sync()
        if not window_s and sampler is not None:
            sampler.mark("start")
        compiled_before = graphs()
        t0 = time.perf_counter()
        for i in range(cfg.steps_per_window):
            dog.at("window", len(window_s) + 1, i)
            step()
            if progress is not None:
                progress.advance()
        trainer.sync()
        dt = time.perf_counter() - t0
        if compiled_before is not None:
            in_windows += graphs() - compiled_before
        window_s.append(dt)
        timed += dt
        if feed is not None:
            feed.read_deferred()  # outside the clock: the window's device events have passed
        dog.progress()
        if log is not None:
            log.window(window_s)
        epoch = epochs_before + len(window_s)
        # --epochs with --duration: the time is up after the epoch that ends past it (training wall time, every
        # rank's clock; bench.measure.goal), and that epoch is evaluated
        out_of_time = tracker is not None and cfg.duration is not None and \
            max(trainer.allgather(wall_s())) >= cfg.duration
        if tracker is not None and (tracker.due(epoch) or out_of_time):
            dog.at("evaluate", epoch)
            t0 = time.perf_counter()
            scores = goal.reduce_counts(trainer.allgather(trainer.evaluate_shard()))
            reached = tracker.add(epoch, wall_s(), time.perf_counter() - t0, scores, schedule.current)
            dog.progress()
            if log is not None:
                log.evaluation(tracker.progress.curve[-1])
            stopping = (reached and cfg.stop_at_target) or out_of_time
            tracker.progress.stopped = "target" if reached and cfg.stop_at_target else "duration" if out_of_time else \
                "epochs" if epoch >= cfg.windows else None
            if checkpoint.due(cfg, epoch, tracker.progress.stopped):
                dog.at("checkpoint", epoch)
                saved_s = checkpoint.save(cfg, trainer, checkpoint.Mark(epoch, schedule.taken, tracker.record()),
                                          wall_s)
                tracker.checkpointed(epoch, saved_s, str(checkpoint.folder(cfg)))
                hooks.checkpointed(trainer, epoch)
                dog.progress()
                if log is not None:
                    log.checkpoint(tracker.progress.checkpoints[-1])
            if stopping:
                break
        if cfg.duration is None or tracker is not None:
            if epoch >= cfg.windows:
                break
        elif max(trainer.allgather(timed)) >= cfg.duration:
            break
    t_end = time.time()
    data = feed.record(timed_from) if feed is not None else None
    net_sent = traffic.sent_between(net_before, traffic.tx_bytes()) if net_before is not None else None
    # every rank its own processes' CPU time, the host's local rank 0 the host's too (bench.measure.host_load)
    cpu = host_load.between(load_before, host_load.reading(host=launch.local_rank == 0),
                            serving=measuring(trainer) < trainer.world_size)
    hooks.snapshot(trainer, "final")
    if sampler is not None:
        sampler.mark("end")
    checksum, final = trainer.checksum(), trainer.fingerprint()  # before the attribution's steps move them
    if progress is not None:
        progress.stop()
    run_id = traced = None
    if cfg.trace:  # --trace: the profiler over steps of their own, after the checksum (bench.measure.trace)
        run_id = trainer.allgather(new_run_id(cfg.mode) if trainer.rank == 0 else None)[0]  # the files' folder
        spec = mode(cfg.mode)
        traced = trace.measure(trainer, cfg, spec.framework, spec.horovod, run_id, window_s,
                               hooks.slowed(trainer.rank, trainer.step, trainer.sync), dog)
    attributed = None
    if cfg.attribution_steps and trainer.world_size > 1:
        why = attribution.unsupported(trainer)
        attributed = attribution.StepsApart(unsupported=why) if why else attribution.measure(
            trainer, cfg.attribution_steps, hooks.slowed(trainer.rank, trainer.compute_step, trainer.sync), dog)
    telemetry = None
    if sampler is not None:
        sampler.stop()
        telemetry = Sampled(summary=sampler.summary(), samples=sampler.samples)

    record = RankRecord(
        rank=trainer.rank,
        local_rank=launch.local_rank,
        host=socket.gethostname(),
        device=trainer.device_label(),
        setup_s=t_setup - t_start,
        first_step_s=first_step_s,
        init_s=t_init_end - t_start,
        train_s=t_end - t_init_end,
        warmup_step_s=warmup_s,
        window_s=window_s,
        graphs_compiled_in_first_step=None if graphs_at_start is None else graphs_after_first - graphs_at_start,
        graphs_compiled_in_warmup=None if graphs_before is None else graphs_before - graphs_after_first,
        graphs_compiled_in_windows=None if graphs_before is None else in_windows,
        checksum=checksum,
        param_sum_initial=initial,
        param_sum_final=final,
        replicas=trainer.replicas_per_process,
        sync_report=trainer.sync_report(),
        telemetry=telemetry,
        net_sent=net_sent,
        cpu=cpu,
        attribution=attributed,
        data=data,
        goal=tracker.record() if tracker is not None else None,
        trace=traced,
    )
    dog.at("gather")
    gathered = trainer.allgather(record)
    if trainer.rank != 0:
        return None
    return Gathered(ranks=sorted(gathered, key=lambda r: r.rank), environment=trainer.environment(),
                    t_start=t_start, run_id=run_id)


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
