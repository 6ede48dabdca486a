"""``bench run CONFIG``: the run a JSON run configuration describes (RunConfig's fields; bench sweep writes one per
cell, so a cell gets its whole configuration, never options rebuilt from it)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import bench.run
from bench.config import RunConfig, option
from bench.errors import BenchError
from bench.launching import envs
from bench.modes import MODES


@dataclass(frozen=True)
class RunFileConfig:
    config: str = option("", "A run configuration as JSON: a file, - for standard input, or the JSON text itself "
                         "(bench sweep gives each cell a file).", argument=True)

    def text(self) -> str:
        try:
            if self.config.lstrip().startswith("{"):
                return self.config
            return sys.stdin.read() if self.config == "-" else Path(self.config).read_text()
        except OSError as exc:
            raise BenchError(f"cannot read {self.config}: {exc.strerror or exc}") from None


def main(cfg: RunFileConfig) -> int:
    text = cfg.text()
    run = RunConfig.from_json(text)
    envs.enter(MODES[run.mode].framework, ["run", text])  # this framework's own environment, where it has one
    bench.run.run(run)
    return 0
