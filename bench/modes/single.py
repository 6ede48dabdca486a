"""What the single-device modes share (no framework import): one process, one device, no distribution."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from bench.errors import BenchError
from bench.launching.detect import LaunchInfo
from bench.launching.supervise import spawn

if TYPE_CHECKING:  # the run configuration imports the mode registry to check a run
    from bench.config import RunConfig


SINGLE_RANK = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}


def preflight(cfg: RunConfig, launch: LaunchInfo, resolve: Callable[[RunConfig, LaunchInfo], RunConfig]) -> RunConfig:
    """One process, one device: --np 1, and no launcher that started more."""
    if cfg.np not in (None, 1) or launch.world_size != 1:
        raise BenchError(f"{cfg.mode} runs one process on one device (--np 1)")
    return resolve(dataclasses.replace(cfg, np=1), launch)


def spawn_one(cfg: RunConfig) -> None:
    spawn([cfg.mode], [SINGLE_RANK], cfg.to_json())
