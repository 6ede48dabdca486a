"""Hooks: what ``bench verify`` asks of an ordinary run, beside (not inside) its config.

A verify run is a normal run of a mode with a few extra requests; they reach the ranks as this object
(in the HVDBENCH_HOOKS environment variable, as the config travels in HVDBENCH_CONFIG), never as fields
of the run's config, so results, sweeps and the CLI never see them:

* ``snapshot_dir``: rank 0 saves every trainable parameter after set-up (``initial.npz``) and after the
  last window (``final.npz``) there (bench.commands.snapshots);
* ``deterministic``: dropout off, deterministic kernels, plain fp32 matmuls (no TF32);
* ``data_shards``: a single-device mode trains on the concatenation of rank shards 0..k-1, the global batch;
* ``fault``: a deliberate bug, the negative control (``skip-allreduce``: each rank steps on its own
  gradients, never averaged with the others);
* ``slow_rank`` and ``slow_factor``: a straggler on purpose (bench.measure.attribution's tests): that rank sleeps
  ``slow_factor - 1`` times the duration of each training step it has just run (the first, warmup, timed and
  compute-only steps; never the exchange-only ones), so its compute takes ``slow_factor`` times as long.
* ``lost_after_checkpoint``: the last rank exits (code 9, no clean-up) right after the checkpoint of that epoch
  is whole, as a lost node would (bench.measure.checkpoint's tests: the run fails, its checkpoint resumes).

Outside bench verify, a run takes hooks from HVDBENCH_HOOKS too, e.g.
``HVDBENCH_HOOKS='{"slow_rank": 1, "slow_factor": 2}' bench torch-ddp``.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.commands.snapshots import save_parameters
from bench.errors import BenchError

HOOKS_ENV = "HVDBENCH_HOOKS"
FAULTS = ("skip-allreduce",)


@dataclass(frozen=True)
class Hooks:
    snapshot_dir: str | None = None
    deterministic: bool = False
    data_shards: int | None = None
    fault: str | None = None
    slow_rank: int | None = None
    slow_factor: float = 2.0
    lost_after_checkpoint: int | None = None

    def __post_init__(self) -> None:
        if self.fault not in (None, *FAULTS):
            raise BenchError(f"unknown fault '{self.fault}' (choose from: {', '.join(FAULTS)})")
        if self.data_shards is not None and (not isinstance(self.data_shards, int) or self.data_shards < 1):
            raise BenchError(f"data shards must be an integer >= 1 (got {self.data_shards})")
        if self.slow_rank is not None and (not isinstance(self.slow_rank, int) or self.slow_rank < 0):
            raise BenchError(f"slow_rank must be a rank number >= 0 (got {self.slow_rank})")
        if not isinstance(self.slow_factor, (int, float)) or self.slow_factor < 1:
            raise BenchError(f"slow_factor must be a number >= 1 (got {self.slow_factor})")

    def check(self, mode) -> None:
        """Refuse requests ``mode`` (a bench.modes.ModeSpec) cannot honour."""
        if self.data_shards is not None and mode.distributed:
            raise BenchError("data shards apply to the single-device modes only")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls) -> Hooks:
        text = os.environ.get(HOOKS_ENV)
        if not text:
            return cls()
        try:
            return cls(**json.loads(text))
        except (json.JSONDecodeError, TypeError) as exc:
            raise BenchError(f"{HOOKS_ENV} is not a hooks record ({exc})") from None

    @contextlib.contextmanager
    def exported(self):
        """Set HVDBENCH_HOOKS for the ranks this process spawns, and restore it afterwards."""
        old = os.environ.get(HOOKS_ENV)
        os.environ[HOOKS_ENV] = self.to_json()
        try:
            yield
        finally:
            if old is None:
                os.environ.pop(HOOKS_ENV, None)
            else:
                os.environ[HOOKS_ENV] = old

    def slowed(self, rank: int, step, sync):
        """``step``, or on the slow rank ``step`` and ``sync`` followed by a sleep of (slow_factor - 1) x their
        duration."""
        if self.slow_rank != rank or self.slow_factor == 1:
            return step
        import time

        def slow_step() -> None:
            t0 = time.perf_counter()
            step()
            sync()
            time.sleep((self.slow_factor - 1) * (time.perf_counter() - t0))

        return slow_step

    def checkpointed(self, trainer, epoch: int) -> None:
        """The ``lost_after_checkpoint`` fault: the last rank dies here after that epoch's checkpoint."""
        if self.lost_after_checkpoint == epoch and trainer.rank == trainer.world_size - 1:
            os._exit(9)

    def snapshot(self, trainer, when: str) -> None:
        """Rank 0's parameter snapshot ``when`` ('initial' or 'final'), if one was asked for. A trainer whose
        ranks hold different parts of the parameters (``gathers_parameters``: torch-hybrid's sharded table)
        gathers them on every rank; rank 0 writes."""
        if self.snapshot_dir is None:
            return
        every_rank = getattr(trainer, "gathers_parameters", False)
        arrays = trainer.parameter_arrays() if every_rank or trainer.rank == 0 else None
        if trainer.rank == 0:
            save_parameters(Path(self.snapshot_dir), arrays, when)
