"""Orchestration of one benchmark run: parent (spawn) or rank (measure, gather, write)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Protocol

from bench.config import RunConfig
from bench.data import datasets, feed
from bench.errors import STOP_SIGNALS, BenchError, NotValid
from bench.hooks import Hooks
from bench.launching import detect, k8s_pod, supervise
from bench.measure import checkpoint, env_faults
from bench.measure.loop import measure
from bench.modes import mode as mode_spec
from bench.records import env, history, mlflow_runs
from bench.records.header import new_run_id
from bench.records.results import (
    build_result,
    check_output_dir,
    render_table,
    telemetry_samples,
    tracker_warnings,
    write_result,
)


class RankProgress:
    """A rich progress bar on rank 0's stderr while steps run (silent when stderr is not a terminal)."""

    def __init__(self, description: str) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        self._description = description
        self._task = None

    def start(self, total: int | None) -> None:
        self._progress.start()
        self._task = self._progress.add_task(self._description, total=total)

    def advance(self) -> None:
        self._progress.advance(self._task)

    def stop(self) -> None:
        self._progress.stop()


SHM_MIN_GIB = 1.0


def warn_small_shm(cfg: RunConfig) -> None:
    """NCCL's shared-memory transport fails or crawls with Docker's default 64 MiB /dev/shm."""
    size = env.shm_gib()
    if cfg.device.value == "cuda" and cfg.np and cfg.np > 1 and size is not None and size < SHM_MIN_GIB:
        print(f"warning: /dev/shm is {size * 1024:.0f} MiB; NCCL needs more between local GPUs. "
              "In Docker use --ipc=host or --shm-size=1g (or larger).", file=sys.stderr)


def warn_preflight(processes: bool) -> None:
    """The cheap checks of bench preflight (bench.measure.env_faults.cheap), once per node before training: each
    warning and error one line on stderr, and the run goes on (``bench preflight`` runs every check). The GPUs'
    other processes only where no rank of this run can hold a GPU yet (``processes``: in the spawner)."""
    for f in env_faults.cheap(processes):
        if f.status in ("error", "warning"):
            print(f"preflight: {f.status}: {f.member}: {f.detail}", file=sys.stderr)


class Job(Protocol):
    """A command whose processes measure together: how the parent starts its ranks, what each rank does."""

    def spawn(self, cfg: Any, info: detect.LaunchInfo) -> None:
        """Start every rank on this host (or through srun inside an allocation) and wait for them."""

    def rank(self, cfg: Any, info: detect.LaunchInfo) -> Path | None:
        """One rank's work, its own checks first; rank 0 writes its record (into :func:`rank_output`) and
        returns the path."""


def parent_or_rank(cfg: Any, job: Job) -> Path | None:
    """The skeleton of every multi-process command (a training run, ``bench allreduce``).

    With no launcher around, this process is the parent: it checks the output folder, then ``job.spawn``
    starts the ranks and waits. Under a launcher (its own spawner, torchrun, mpirun, horovodrun, srun,
    TF_CONFIG) it is a rank: it checks the rendezvous addresses it was given, takes the parent's resolved
    config when the parent passed one (HVDBENCH_CONFIG), and does the rank's work. ``cfg`` is a frozen config
    with ``output``, ``rendezvous_timeout`` and ``from_json``. A pod of the tf-native indexed Job builds its
    TF_CONFIG from its name first (bench.launching.k8s_pod).
    """
    tf_config = k8s_pod.pod_tf_config(dict(os.environ))
    if tf_config:
        k8s_pod.wait_resolvable(tf_config, cfg.rendezvous_timeout)
        os.environ["TF_CONFIG"] = tf_config
    info = detect.detect()
    if info.launcher == "none":
        check_output_dir(cfg.output)
        job.spawn(cfg, info)
        return None
    detect.validate_rendezvous(info)
    inherited = os.environ.get(supervise.CHILD_CONFIG_ENV)
    if inherited:
        cfg = type(cfg).from_json(inherited)
    return job.rank(cfg, info)


def rank_output(cfg: Any, info: detect.LaunchInfo) -> Path | None:
    """Rank 0's output folder, made and proven writable once the rank's own checks passed (a run its launcher
    started wrongly leaves no folder behind); None on the other ranks."""
    return check_output_dir(cfg.output) if info.rank == 0 else None


def run(cfg: RunConfig, hooks: Hooks | None = None) -> Path | None:
    """Run ``cfg.mode``; returns the result path on the rank that wrote it, else None.

    ``hooks`` (bench verify's requests) go to the ranks this process spawns; a rank reads its own from
    the environment (bench.hooks)."""
    spec = mode_spec(cfg.mode)
    hooks = hooks or Hooks.from_env()
    hooks.check(spec)
    return parent_or_rank(cfg, Training(spec, hooks))


class Training:
    """A training run as a :class:`Job`: the mode's spawner, then each rank's measurement loop."""

    def __init__(self, spec, hooks: Hooks) -> None:
        self.spec, self.hooks = spec, hooks

    def spawn(self, cfg: RunConfig, info: detect.LaunchInfo) -> None:
        mode = self.spec.load()
        resolved = mode.preflight(cfg, info)
        if resolved.data:
            feed.check(resolved)  # the dataset's own checks, once, before any rank starts
        if resolved.resume_from:
            checkpoint.check(resolved)  # the checkpoint is this configuration's, before any rank starts
        warn_preflight(processes=True)
        with self.hooks.exported():
            mode.spawn(resolved)

    def rank(self, cfg: RunConfig, info: detect.LaunchInfo) -> Path | None:
        if cfg.mode != self.spec.name:
            raise BenchError(f"{supervise.CHILD_CONFIG_ENV} is for mode {cfg.mode}, not {self.spec.name}")
        return train(cfg, info, self.spec.load(), self.hooks)


def log_to_mlflow(cfg: RunConfig, path: Path) -> None:
    """--mlflow: the written result as an MLflow run; a server that is down or refuses is one warning line, the
    result stays written and the run's exit status is its own."""
    try:
        run_id, new = mlflow_runs.log(cfg.mlflow, path, cfg.mlflow_experiment)
    except BenchError as exc:
        print(f"warning: not logged to MLflow (the result is written): {exc}", file=sys.stderr)
        return
    print(f"mlflow: {'logged as' if new else 'already logged as'} run {run_id} in experiment "
          f"{cfg.mlflow_experiment} at {history.shown(cfg.mlflow)}")


def train(cfg: RunConfig, info: detect.LaunchInfo, mode, hooks: Hooks) -> Path | None:
    """One rank of a training run: preflight, the measurement loop, and (rank 0) the result written whole."""
    cfg = mode.preflight(cfg, info)
    if info.launcher != "self":  # started by another launcher: no parent checked the dataset and the checkpoint
        if cfg.data:
            feed.check(cfg)
        if cfg.resume_from:
            checkpoint.check(cfg)
    if hasattr(mode, "serve") and mode.serve(cfg, info):
        return None
    out_dir = rank_output(cfg, info)
    if info.local_rank == 0:
        warn_small_shm(cfg)
        if info.launcher != "self":  # no spawner of bench's ran the checks on this node
            warn_preflight(processes=False)
    # --data: what the dataset is as the run starts; rank 0 writes no result if it changed by the end
    data_before = datasets.state(cfg.data) if cfg.data and info.rank == 0 else None
    trainer = mode.make_trainer(cfg, info, hooks)
    # The bar only on an interactive terminal: its refresh thread would otherwise compete for the GIL.
    progress = RankProgress(f"{cfg.mode} {cfg.model}") if info.rank == 0 and sys.stderr.isatty() else None

    gathered = measure(trainer, cfg, info, progress, hooks, new_run_id(cfg.mode))
    trainer.teardown()
    if gathered is None:
        return None
    if data_before is not None:
        datasets.check_unchanged(cfg.data, data_before)

    import signal

    from rich.console import Console

    result = build_result(cfg, info, gathered, gathered.run_id)
    # A stop signal now waits until the files are whole: the measurement is finished, it is not lost.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        path = write_result(out_dir, result, telemetry_samples(gathered))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    if hooks.snapshot_dir is not None:
        return path  # bench verify reads the result and judges the ranks' agreement itself
    console = Console(file=sys.stdout)
    console.print(render_table(result))
    console.print(f"result: {path}")
    for warning in tracker_warnings(result):
        print(warning, file=sys.stderr)
    if cfg.mlflow:
        log_to_mlflow(cfg, path)
    if not result.sync.ranks_in_sync:
        raise NotValid(f"ranks finished with different parameters (see {path}); the run is not valid")
    return path
