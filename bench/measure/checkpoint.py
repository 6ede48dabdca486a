"""Checkpoints of a run that trains to a goal (``--checkpoint-every N``), and resuming from one
(``--resume-from DIR``).

What a checkpoint holds (a folder, written whole: a new one replaces the old only once complete)::

    state.json     the configuration it belongs to, the epoch it ends, the schedule's step, the evaluations so far
                   and the training wall time up to it (bench.measure.goal)
    torch.pt       PyTorch: the model's and the optimizer's state dicts and every rank's random state, CPU and
                   GPU (rank 0 writes; every rank reads, and takes its own random state back)
    tf/            TensorFlow: tf.train.Checkpoint of the model and the optimizer (no random state: each dropout
                   mask is keyed by the rank and the optimizer's step count, which the checkpoint holds;
                   bench.modes.tf_common.DropoutMasks)

When: after the evaluation that follows every N-th epoch (N a multiple of --eval-every: a checkpoint never holds
half a training loss), and after the one that ends a run stopped for its time (``--duration``: sized to a job's
time limit, it is where a checkpoint is wanted most; that epoch is evaluated too); not after the last epoch (the
run ends there) nor at the target when the run stops there. ``--duration`` may change on resuming: the training
wall time goes on from the checkpoint's, so the next job passes the whole budget (``--duration 7200`` after 3600).

Resuming continues the same run. The batches come in the same order: the loader's shuffle is seeded by (seed,
epoch). The loop's first step (its init, as in every run: it traces and warms up) trains once; then the checkpoint
is loaded over that step's update (the model, the optimizer and, for PyTorch, every rank's random state), and the
feed is reopened at the checkpoint's epoch, past any batches of it already trained on (bench.measure.loop.resume;
a checkpoint ends an epoch, so none), the first step's batch drawn again. The timed epochs follow from there, each
evaluated as before. So a resumed run takes the same steps on the same batches with the same learning rates as one
that was never interrupted (tests/multiproc/test_checkpoint.py compares their final parameters).

Time is not counted twice: ``wall_s`` of an evaluation after the resume is the checkpoint's wall time plus the time
since the resumed run's init ended; the time between the checkpoint and the interruption, and the resumed run's
own init, are in neither. The result's ``training.resumed`` says from where.

A checkpoint belongs to one configuration: every field of the resolved run configuration but those that say how
the run is watched or where it writes (:data:`FREE`); resuming with another refuses with the first that differs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bench.errors import BenchError
from bench.measure.goal import Progress
from bench.typed import parse

STATE = "state.json"
FORMAT = 2  # 2: torch.pt holds each rank's random state
# Fields a resumed run may change: how it is watched, where it writes, how its input is read (not what).
FREE = frozenset({"output", "resume_from", "checkpoint_every", "checkpoint_dir", "telemetry", "telemetry_interval",
                  "stall_timeout", "rendezvous_timeout", "loader_workers", "attribution_steps", "extra", "duration"})


@dataclass(frozen=True)
class Mark:
    """Where in the run a checkpoint is taken."""
    epoch: int  # the epochs it holds
    schedule_taken: int  # the learning-rate schedule's steps taken (bench.measure.goal.Schedule)
    goal: Progress  # the evaluations and checkpoints so far


class State(BaseModel):
    """A checkpoint's state.json (module docstring)."""
    format: int
    config: dict[str, Any]  # :func:`configuration` of the run that wrote it
    epoch: int
    schedule_taken: int
    goal: Progress
    wall_s: float  # the training wall time up to it
    save_s: float  # rank 0's time to write it
    written_utc: str


def configuration(cfg) -> dict[str, Any]:
    """The fields of a resolved run configuration that a checkpoint belongs to, as JSON values."""
    fields = json.loads(json.dumps(asdict(cfg), default=str))
    return {k: v for k, v in sorted(fields.items()) if k not in FREE}


def folder(cfg) -> Path:
    """Where this run writes its checkpoints: --checkpoint-dir, else <output>/checkpoints/<mode>-np<N>-<key>, the key
    the first 8 hex digits of the SHA-256 of :func:`configuration`: runs of other configurations writing into one
    output (another seed, dataset, model, rate) never share a folder, and a resumed run (the same configuration
    by construction) writes where the run it continues wrote."""
    if cfg.checkpoint_dir:
        return Path(cfg.checkpoint_dir)
    key = hashlib.sha256(json.dumps(configuration(cfg), sort_keys=True).encode()).hexdigest()[:8]
    return Path(cfg.output) / "checkpoints" / f"{cfg.mode}-np{cfg.np}-{key}"


def resolve(path: str | Path) -> Path:
    """The folder that holds the checkpoint ``path`` names: ``path`` itself, or the previous checkpoint that
    :func:`save` had moved aside (``.<name>.old``) when the run was interrupted between its two renames."""
    path = Path(path)
    aside = path.with_name(f".{path.name}.old")
    if not (path / STATE).exists() and (aside / STATE).exists():
        return aside
    return path


def read_state(path: str | Path) -> State:
    """A checkpoint's state.json, or one line saying why ``path`` is not a checkpoint."""
    state_file = resolve(path) / STATE
    try:
        state = json.loads(state_file.read_text())
    except FileNotFoundError:
        raise BenchError(f"--resume-from {path}: not a checkpoint (no {STATE}; --checkpoint-every N writes "
                         "one)") from None
    except (OSError, ValueError) as exc:
        raise BenchError(f"--resume-from {path}: cannot read {STATE} ({exc})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise BenchError(f"--resume-from {path}: {STATE} is not a checkpoint of this hvdbench (format {FORMAT})")
    return parse(state, State, f"--resume-from {path}: {STATE}")


def check(cfg) -> State:
    """Before any rank starts: the checkpoint ``cfg.resume_from`` names belongs to this run's configuration and has
    epochs left to train; returns its state."""
    state = read_state(cfg.resume_from)
    theirs, ours = state.config, configuration(cfg)
    for name in sorted(set(theirs) | set(ours)):
        if theirs.get(name) != ours.get(name):
            flag = "--" + name.replace("_", "-")
            raise BenchError(f"--resume-from {cfg.resume_from}: the checkpoint is of another configuration ({flag} "
                             f"{theirs.get(name)} there, {ours.get(name)} here)")
    if state.epoch >= cfg.epochs:
        raise BenchError(f"--resume-from {cfg.resume_from}: the checkpoint already holds all {cfg.epochs} epoch(s)")
    return state


def due(cfg, epoch: int, stopped: str | None) -> bool:
    """Whether to write a checkpoint after ``epoch`` (module docstring); ``stopped``: why the run stops there
    (bench.measure.goal's ``target``, ``duration``, ``epochs``), or None."""
    if not cfg.checkpoint_every or epoch >= cfg.epochs or stopped == "target":
        return False
    return stopped == "duration" or epoch % cfg.checkpoint_every == 0


def save(cfg, trainer, mark: Mark, wall_s) -> float:
    """Write the checkpoint of ``trainer`` at ``mark`` (every rank calls this); returns the seconds it took on
    this rank. ``wall_s()``: the training wall time, read when the model is written (the resumed run goes on
    from there). A fresh folder beside the old one, renamed over it once whole: an interruption while writing
    leaves the previous checkpoint as it was (between the two renames, moved aside, where :func:`resolve` finds
    it). Every file is synced to the disk before the renames, and the folder's entries after them."""

    def synced(path: Path) -> None:
        """fsync a file (its data) or a folder (its entries)."""
        handle = os.open(path, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)

    t0 = time.perf_counter()
    target = folder(cfg)
    fresh = target.with_name(f".{target.name}.writing")
    scratch = None
    if trainer.rank == 0:
        shutil.rmtree(fresh, ignore_errors=True)
        fresh.mkdir(parents=True)
        where = fresh
    else:  # a rank that writes too (tf.distribute's workers) writes to a scratch folder of its own
        import tempfile

        scratch = where = Path(tempfile.mkdtemp(prefix="hvdbench-ckpt-"))
    try:
        trainer.save_state(where)
        if trainer.rank == 0:
            state = State(format=FORMAT, config=configuration(cfg), epoch=mark.epoch,
                          schedule_taken=mark.schedule_taken, goal=mark.goal, wall_s=wall_s(),
                          save_s=time.perf_counter() - t0,
                          written_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            (fresh / STATE).write_text(state.model_dump_json(indent=1, by_alias=True))  # every field: the curve
            # is appended to in place, which pydantic does not count as set
            # on the disk before the renames make it the checkpoint, and the renames after them: a rename is atomic,
            # not durable, and a node that loses power after "checkpoint written" must not leave empty files
            for path in [*sorted(fresh.rglob("*")), fresh]:
                synced(path)
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            if target.exists():
                os.replace(target, old)
            os.replace(fresh, target)
            synced(target.parent)
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    trainer.allgather(None)  # every rank waits until the checkpoint is whole
    return time.perf_counter() - t0


def load(cfg, trainer) -> State:
    """Every rank: the checkpoint's state, and the trainer's model and optimizer restored from it."""
    state = read_state(cfg.resume_from)
    trainer.load_state(resolve(cfg.resume_from))
    return state
