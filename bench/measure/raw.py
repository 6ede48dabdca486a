"""What each rank measured, as it hands it to rank 0 (:class:`RankRecord`), and what rank 0 gathers
(:class:`Gathered`): the raw input a run's result is built from (bench.records.results.build_result).

Plain dataclasses: the frameworks' allgathers (torch.distributed, Horovod, TensorFlow's collectives) pickle them
between the ranks. The timing skeleton's samples are fields; each measurement beside it is a tracker's part
(bench.measure.tracker), kept by the tracker's name and read by the module that made it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RankRecord:
    """One rank's raw samples and checks (bench.measure.loop.measure); seconds on the rank's own clock."""
    rank: int
    local_rank: int
    host: str
    device: str  # the framework's label: "cpu (2 threads)", "cuda:0 NVIDIA H200", "/physical_device:GPU:0"
    setup_s: float  # process start to the end of the trainer's set-up
    first_step_s: float
    init_s: float  # process start to the end of the first (synchronised) step
    train_s: float  # the end of init to the end of the last timed window
    warmup_step_s: list[float]
    window_s: list[float]  # each timed window's duration
    checksum: str  # SHA-256 of the trainable parameters after the run ("diverged: ..." where they were not finite)
    param_sum_initial: float | None
    param_sum_final: float | None
    replicas: int = 1  # the model replicas this process drives (tf-native mirrored: its GPUs)
    sync_report: dict[str, Any] | None = None  # a mode's own agreement check (tf-native ps, hybrid)
    goal: Any = None  # --epochs: the evaluations and checkpoints (bench.measure.goal.Progress)
    parts: dict[str, Any] = field(default_factory=dict)  # each tracker's part, by its name (bench.measure.tracker)


@dataclass
class Gathered:
    """Every measuring rank's record, on rank 0, with what the result takes from rank 0 alone."""
    ranks: list[RankRecord]  # by rank
    environment: dict[str, Any]  # bench.records.env
    t_start: float
    run_id: str | None = None  # rank 0's run id, which the result is written under (and a trace's folder named)

    @property
    def window_s(self) -> list[list[float]]:
        """Every rank's timed window durations."""
        return [r.window_s for r in self.ranks]
