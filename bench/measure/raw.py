"""What each rank measured, as it hands it to rank 0 (:class:`RankRecord`), and what rank 0 gathers
(:class:`Gathered`): the raw input a run's result is built from (bench.records.results.build_result).

Plain dataclasses: the frameworks' allgathers (torch.distributed, Horovod, TensorFlow's collectives) pickle them
between the ranks. Each part a measurement adds is that measurement's own record, read by the module that made it
(bench.measure.attribution, bench.data.feed, bench.measure.goal, bench.measure.host_load, bench.measure.trace,
bench.measure.telemetry, bench.measure.traffic)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.data.feed import FeedRecord
    from bench.measure.attribution import StepsApart
    from bench.measure.goal import Progress
    from bench.measure.host_load import CpuRecord
    from bench.measure.telemetry import Sampled
    from bench.measure.trace import Traced


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
    graphs_compiled_in_first_step: int | None = None  # --compile, --xla: graphs compiled in the first step
    graphs_compiled_in_warmup: int | None = None  # --compile, --xla: ... in the warmup (and settling) steps after it
    graphs_compiled_in_windows: int | None = None  # --compile, --xla: graphs compiled during the timed windows
    sync_report: dict[str, Any] | None = None  # a mode's own agreement check (tf-native ps, hybrid)
    telemetry: Sampled | None = None  # the NVML sampler's summary and samples (bench.measure.telemetry)
    net_sent: dict[str, int] | None = None  # bytes each interface sent in the timed windows (bench.measure.traffic)
    cpu: CpuRecord | None = None  # the rank's and its host's CPU time (bench.measure.host_load)
    attribution: StepsApart | None = None  # compute-only and exchange-only steps (bench.measure.attribution)
    data: FeedRecord | None = None  # --data: the input pipeline's waits (bench.data.feed)
    goal: Progress | None = None  # --epochs: the evaluations and checkpoints (bench.measure.goal)
    trace: Traced | None = None  # --trace: the traced steps (bench.measure.trace)


@dataclass
class Gathered:
    """Every measuring rank's record, on rank 0, with what the result takes from rank 0 alone."""
    ranks: list[RankRecord]  # by rank
    environment: dict[str, Any]  # bench.records.env
    t_start: float
    run_id: str | None = None  # --trace: the id the trace folder was named after, before the result was written
    telemetry_note: str | None = None  # why no telemetry sampler ran, where none did

    @property
    def window_s(self) -> list[list[float]]:
        """Every rank's timed window durations."""
        return [r.window_s for r in self.ranks]
