"""Every record kind but a run's result and bench diagnose's record (bench.records.schema), typed: pydantic models
whose JSON Schema ``bench schema KIND`` prints, and that bench.records.store validates each record against before
it writes it.

Each model types the fields its command writes and that other commands or people read; sections that carry a
command's own free-form detail (a resolved configuration, an environment) stay open dictionaries. A record of
one of these kinds carries the header of bench.records.header (the result schema's version, its kind, run id,
creation time, hvdbench version), except diagnose's baseline, which names the diagnose run it was taken from.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Typed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Header(_Typed):
    schema_version: int
    run_id: str
    created_utc: str
    hvdbench_version: str


class VerifyCheck(_Open):
    """A check's outcome: PASS, FAIL or SKIP, and why when not PASS."""
    status: Literal["PASS", "FAIL", "SKIP"]
    reason: str | None = Field(None, description="why it failed or was skipped; null when it passed")


class VerifyRow(VerifyCheck):
    """One mode held against its single-device reference (bench.commands.verify); the figures are absent where the
    mode did not run (SKIP, or a run that failed)."""
    mode: str
    framework: str
    world_size: int | None = Field(None, description="the mode's ranks, and the reference's data shards")
    hosts: list[str] | None = None
    ranks_in_sync: bool | None = None
    params_changed: bool | None = None
    initial_identical: bool | None = Field(None, description="its initial weights equal the reference's")
    max_abs: float | None = Field(None, description="max |w - w_ref| over every trainable parameter after the steps")
    max_rel: float | None = None
    max_update: float | None = Field(None, description="max |w_ref - w0|: the reference's own update")
    of_update: float | None = Field(None, description="max_abs / max_update")
    tolerance: float | None = Field(None, description="of_update above it FAILs")


class CrossCheck(VerifyCheck):
    """PyTorch against TensorFlow from the same initial weights on the same global batch (bench.commands.
    verify_cross)."""
    steps: int
    global_batch: int
    loss_torch: list[float]
    loss_tf: list[float]
    max_abs_loss: float
    max_rel_loss: float
    tolerance: float
    final_weights: dict[str, float] = Field(description="TensorFlow's final weights against PyTorch's: max_abs, "
                                            "max_rel, max_update, of_update as a mode's")
    definition: str


class Verify(_Header):
    """bench verify: every mode's parameters after the same steps against the reference's."""
    model_config = ConfigDict(title="hvdbench verify record")
    kind: Literal["verify"]
    config: dict[str, Any]
    modes: list[VerifyRow]
    cross_framework: CrossCheck | None = Field(
        description="PyTorch against TensorFlow from the same initial weights (--cross); null when not run")
    passed: bool = Field(description="no mode FAILed and the cross-framework check (if run) PASSed")
    definitions: dict[str, str]
    expected_differences: list[str]
    params_kept: str | None = Field(description="--keep-params: the folder of the parameter files")


class AllreduceRow(_Open):
    """One message size (bench.commands.allreduce)."""
    bytes: int
    time_s: float = Field(description="median over the timed iterations of the slowest rank's time")
    algbw_GBps: float
    busbw_GBps: float
    correct: bool
    model: str | None = Field(description="the model whose gradient is this size, if one is")


class Allreduce(_Header):
    """bench allreduce: one collective's time and bandwidth per message size."""
    model_config = ConfigDict(title="hvdbench allreduce record")
    kind: Literal["allreduce"]
    config: dict[str, Any]
    launcher: str
    world_size: int
    environment: dict[str, Any]
    rows: list[AllreduceRow]
    all_correct: bool
    definitions: dict[str, str]
    floor: dict[str, Any] | None = Field(None, description="a threshold pack's one-node all-reduce floor, where the "
                                         "run had its shape (bench.commands.allreduce.floor): model, bytes, gpus, "
                                         "busbw_GBps, floor_GBps, pack, source, passed; null where none applied")

    @property
    def op(self) -> str:
        """allreduce, allgather or alltoall: the collective it measured (records before --op: allreduce)."""
        return self.config.get("op", "allreduce")

    @property
    def backend(self) -> str:
        return self.config.get("backend", "?")


class PeakShape(_Typed):
    m: int
    n: int
    k: int
    tflops: list[float] = Field(description="raw: each repeat's rate")
    tflops_median: float


class Peak(_Header):
    """bench peak: the sustained matrix-multiply rate of one device at one precision (bench.measure.device_peak)."""
    model_config = ConfigDict(title="hvdbench peak record")
    kind: Literal["peak"]
    host: str
    device: str
    precision: str
    dtype: str
    torch: str
    seconds_per_repeat: float
    repeats: int
    shapes: list[PeakShape]
    peak_tflops: float
    peak_shape: list[int] = Field(min_length=3, max_length=3)
    definition: str


class Baseline(_Typed):
    """diagnose --save-baseline: a passing diagnose's figures, for later runs to be held against."""
    model_config = ConfigDict(extra="forbid", title="hvdbench diagnose baseline")
    kind: Literal["diagnose-baseline"]
    from_run: str = Field(description="the diagnose run it was taken from")
    created_utc: str
    nodes: list[str]
    signature: dict[str, Any] = Field(description="what a run held against it must share (mode, run arguments, "
                                                  "devices per node, backend, sizes, data)")
    figures: dict[str, dict[str, dict[str, Any]]]


class DataBenchRow(_Typed):
    loader: str
    workers: int
    device: str = Field("cpu", description="where it decoded: cpu, or cuda (a loader that decodes on a GPU, GPU 0)")
    images_per_sec: float = Field(description="median over the rounds (sequences per second for a tokens file)")
    raw: list[float] = Field(description="raw: every round's rate")
    tokens_per_sec: float | None


class DataBench(_Header):
    """bench data bench: each loader's rate alone, per worker count (bench.commands.data)."""
    model_config = ConfigDict(title="hvdbench data-bench record")
    kind: Literal["data-bench"]
    config: dict[str, Any]
    format: str
    train_samples: int
    rows: list[DataBenchRow]
    batches: dict[str, list[int]] = Field(description="per worker count: the untimed and the timed batches")
    decode_rate_per_core: dict[str, float]
    cores_to_feed: dict[str, Any]
    gpu_rates: dict[str, Any]
    definitions: dict[str, str]


class ConvergeRow(_Typed):
    """One configuration (mode, np) over its repeats (bench.commands.converge)."""
    mode: str
    np: int
    repeats: int
    reached: int = Field(description="repeats that reached the target")
    time_to_target_s: float | None = Field(description="median; null when half or more did not reach it")
    time_min_s: float | None
    time_max_s: float | None
    epochs_to_target: float | None
    final_top1: float
    final_spread: float
    epochs_run: int
    in_sync: bool
    init_s: float
    results: list[str]
    final_vs_median: float


class ConvergeCurve(_Typed):
    mode: str
    np: int
    seed: int
    init_s: float
    points: list[tuple[float, float]] = Field(description="(wall_s, top1) of every evaluation")


class Converge(_Header):
    """bench converge: time to a target accuracy per configuration, and whether they agree."""
    model_config = ConfigDict(title="hvdbench converge record")
    kind: Literal["converge"]
    target_accuracy: float
    tolerance: float
    median_final_top1: float
    rows: list[ConvergeRow]
    verdict: Literal["PASS", "FAIL"]
    reasons: list[str]
    curves: list[ConvergeCurve]


class TunePoint(_Typed):
    batch: int
    rate: float | None = Field(description="samples/s total; null where the batch did not run")
    gain: float | None = Field(description="rate / the previous running batch's - 1")
    status: str
    error: str | None
    result: str | None


class Tune(_Header):
    """bench tune: the doubling batch search and its knee (bench.commands.tune)."""
    model_config = ConfigDict(title="hvdbench tune record")
    kind: Literal["tune"]
    mode: str
    np: int
    model: str
    precision: str
    options: str
    common: dict[str, Any] = Field(description="the run options every run got")
    min_gain: float
    max_batch: int
    points: list[TunePoint]
    knee: int | None
    why: str


class SoakFinding(_Typed):
    """One judged item of a soak (bench.measure.soak): what, about which device, its status, what was seen."""
    check: str = Field(description="load, throughput, result, throttle, temperature, power, ecc")
    member: str = Field(description="a device's label, its model, the node, or '-'")
    status: Literal["error", "warning", "ok", "n/a"]
    detail: str = Field(description="what was seen against its threshold, and what to do")


class SoakDevice(_Typed):
    """One device's load and readings (bench.measure.soak)."""
    label: str = Field(description="'cuda:0 NVIDIA H100 80GB HBM3', or 'cpu (N threads)'")
    model: str
    window_tflops: list[float] = Field(description="raw: every window's rate, 2 x N^3 x products / its time")
    median_tflops: float | None
    digest_before: str | None = Field(description="SHA-256 of the deterministic product before the load")
    digest_after: str | None = Field(description="and after it")
    error: str | None = Field(description="why the load failed on it; null when it ran")
    nvml: dict[str, Any] | None = Field(None, description="a GPU's NVML figures under load "
                                        "(bench.measure.soak.gpu_figures); absent on the CPU")
    series: dict[str, list[Any]] | None = Field(None, description="raw: every NVML sample under load, by field "
                                                "(t, temperature_c, sm_clock_mhz, power_w, throttle_reasons)")


class Soak(_Header):
    """bench soak: a sustained load on every GPU of the node, judged as operators accept a node (bench.measure.
    soak)."""
    model_config = ConfigDict(title="hvdbench soak record")
    kind: Literal["soak"]
    host: str
    config: dict[str, Any]
    torch: str
    size: int = Field(description="the load's N (an N x N by N x N product)")
    dtype: str
    seconds: float = Field(description="the load's measured length")
    devices: list[SoakDevice]
    gpu_reason: str | None = Field(description="why no GPU was read (a CPU soak, no NVML); null on GPUs")
    limits: dict[str, float]
    limits_source: str = Field(description="where the thresholds came from: the defaults, or a threshold pack")
    findings: list[SoakFinding]
    passed: bool = Field(description="no finding is an error")
    definitions: dict[str, str]
