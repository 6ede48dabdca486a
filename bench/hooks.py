"""Hooks: what ``bench verify`` asks of an ordinary run, beside (not inside) its config.

A verify run is a normal run of a mode with a few extra requests; they reach the ranks as this object
(in the HVDBENCH_HOOKS environment variable, as the config travels in HVDBENCH_CONFIG), never as fields
of the run's config, so results, sweeps and the CLI never see them:

* ``snapshot_dir``: rank 0 saves every trainable parameter after set-up (``initial.npz``) and after the
  last window (``final.npz``) there (bench.snapshots);
* ``deterministic``: dropout off, deterministic kernels, plain fp32 matmuls (no TF32);
* ``data_shards``: a single-device mode trains on the concatenation of rank shards 0..k-1, the global batch;
* ``fault``: a deliberate bug, the negative control (``skip-allreduce``: each rank steps on its own
  gradients, never averaged with the others).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.errors import BenchError

HOOKS_ENV = "HVDBENCH_HOOKS"
FAULTS = ("skip-allreduce",)


@dataclass(frozen=True)
class Hooks:
    snapshot_dir: str | None = None
    deterministic: bool = False
    data_shards: int | None = None
    fault: str | None = None

    def __post_init__(self) -> None:
        if self.fault not in (None, *FAULTS):
            raise BenchError(f"unknown fault '{self.fault}' (choose from: {', '.join(FAULTS)})")
        if self.data_shards is not None and (not isinstance(self.data_shards, int) or self.data_shards < 1):
            raise BenchError(f"data shards must be an integer >= 1 (got {self.data_shards})")

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

    def snapshot(self, trainer, when: str) -> None:
        """Rank 0's parameter snapshot ``when`` ('initial' or 'final'), if one was asked for."""
        if self.snapshot_dir is not None and trainer.rank == 0:
            from bench.snapshots import save_parameters

            save_parameters(Path(self.snapshot_dir), trainer.parameter_arrays(), when)
