"""The result file, typed: pydantic models whose JSON Schema ``bench schema`` prints.

Every result is validated against these models before it is written, and when it is read. Sections
that carry free-form records (the environment, telemetry, per-rank details) keep their required keys
typed and allow more. Results of schema 1 (image-only, before the workload and the sample unit) are
read through :func:`upgrade`, which renames their image figures to sample figures; nothing is lost.

Schema history:
  1  image CNNs only; throughput keys ``images_per_sec_*``, energy ``energy_per_image_j``
  2  ``workload`` section (kind, sample unit, parameters, training FLOPs per sample); throughput in
     samples (``samples_per_sec_*``, text adds ``tokens_per_sec_*``); ``model_tflops_per_gpu``;
     later within 2, each optional so that earlier results still read: ``traffic``, ``utilisation``,
     ``attribution``
"""

from __future__ import annotations

import statistics
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from bench import SCHEMA_VERSION
from bench.data.feed import Input
from bench.errors import BenchError
from bench.measure.attribution import Attribution
from bench.measure.goal import Training
from bench.measure.host_load import HostLoad
from bench.measure.stats import job_step, ratio_of_totals
from bench.measure.telemetry import Telemetry
from bench.measure.trace import Trace
from bench.measure.traffic import Traffic
from bench.models import MODELS
from bench.records import kinds
from bench.typed import Open as _Open
from bench.typed import first_problem


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = Field(description="what the model trains on: image, ...")
    unit: str = Field(description="one sample: image, sequence")
    symbol: str = Field(description="throughput's unit in tables: img/s, seq/s")
    model: str
    parameters: int | None = Field(description="trainable parameters at the run's class count")
    gradient_bytes: int | None = Field(description="fp32 gradient one data-parallel step allreduces")
    train_flops_per_sample: float | None = Field(
        description="matmul and convolution FLOPs of forward + backward per sample (bench.models)")
    tokens_per_sample: int | None = Field(None, description="text workloads: tokens in one sample")


def hosts_in(environment: dict[str, Any]) -> list[str]:
    """The hosts in a record's environment section (a run's result, bench allreduce's record): every rank's, and
    every task of a parameter-server cluster."""
    tasks = (environment.get("distribution") or {}).get("tasks") or []
    return sorted({r["host"] for r in environment.get("ranks", [])} | {t["host"] for t in tasks})


class RankInfo(_Open):
    rank: int
    local_rank: int
    host: str
    device: str


class Environment(_Open):
    """Where the run ran (bench.records.env); more fields than these, each a framework's or library's versions."""
    ranks: list[RankInfo] = Field(description="every rank's host and device")
    nvml: dict[str, Any] | None = Field(None, description="the GPUs NVML saw, and its driver; absent without NVML")
    distribution: dict[str, Any] | None = Field(
        None, description="tf-native's cluster: every task and its host (the ranks measure; ps and coordinator not)")
    hostname: str | None = None
    python: str | None = None
    cpu: str | None = Field(None, description="the CPU's model name")
    cpu_count: int | None = None
    usable_cores: int | None = Field(None, description="the cores the run's cpuset and quota leave it; absent in "
                                     "older records")
    mpi: str | None = Field(None, description="the MPI's version line, where there is one")
    container: str | None = Field(None, description="the container runtime the run was in, where it was in one")

    @property
    def hosts(self) -> list[str]:
        """The hosts in this environment: every rank's, and every task of a parameter-server cluster."""
        return hosts_in(self.model_dump(include={"ranks", "distribution"}))

    def part(self, name: str) -> dict[str, Any]:
        """A framework's or library's part of the environment (torch, tensorflow, horovod: its version and build);
        empty where the record has none."""
        section = (self.model_extra or {}).get(name)
        return section if isinstance(section, dict) else {}

    def versions(self, name: str) -> str | None:
        """The version a part of the environment (torch, horovod, ...) names, where it has one."""
        version = self.part(name).get("version")
        return None if version is None else str(version)


class Timing(_Open):
    unit: Literal["s"]
    init_s: float
    first_step_s: float
    train_s: float
    timed_windows_s: float
    compile_s: float | None = Field(None, description="--compile or --xla: first step beyond a compiled step's")
    graphs_compiled_in_first_step: int | None = Field(
        None, description="--compile or --xla: graphs compiled in the first step (fewest on any rank)")
    graphs_compiled_in_warmup: int | None = Field(
        None, description="--compile or --xla: graphs compiled in the untimed steps after the first (0 expected)")
    graphs_compiled_in_windows: int | None = Field(
        None, description="--compile or --xla: graphs compiled during the timed windows (0 expected)")
    per_rank: list[dict[str, Any]]
    definitions: dict[str, str]


class Samples(_Open):
    unit: Literal["s"]
    steps_per_window: int
    samples_per_window_per_rank: int
    replicas_per_rank: int
    window_s: list[list[float]] = Field(description="raw: every measuring rank's timed window durations")
    warmup_step_s: list[list[float]]


class Spread(_Open):
    """A sample's statistics (bench.measure.stats.summarize)."""
    n: int
    mean: float
    sd: float | None = None
    ci95_half_width: float | None = None
    ci95: list[float] | None = None
    median: float
    min: float
    max: float


class Summary(_Open):
    unit: Literal["samples/s"]
    samples_per_sec_total: float
    samples_per_sec_per_gpu: float
    samples_per_sec_rank0_x_world: float
    samples_per_sec_wall_train: float | None
    samples_per_sec_wall_total: float
    tokens_per_sec_total: float | None = None
    tokens_per_sec_per_gpu: float | None = None
    model_tflops_per_gpu: float | None = None
    ci95: list[float | None] | None = Field(description="95% interval of samples_per_sec_total within this run (from "
                                            "the slowest rank's window times; its upper bound null where the "
                                            "windows leave the rate unbounded above); not run-to-run variation")
    ci95_kind: Literal["within-run"] = "within-run"
    median: float
    total: Spread | None = Field(None, description="the per-window total rates' statistics; absent in records "
                                 "before it")
    per_gpu: Spread | None = None
    windows_total_samples_per_sec: list[float] | None = None
    warmup_step_s: Spread | None = None


class Sync(_Open):
    param_checksums: list[str]
    ranks_in_sync: bool
    params_changed: bool
    reports: list[dict[str, Any]] = Field([], description="the modes' own agreement checks (tf-native ps, hybrid)")
    param_sum_initial: list[float | None] = []
    param_sum_final: list[float | None] = []
    definition: str | None = None


class Utilisation(BaseModel):
    """MFU: model FLOP/s per device against a measured and a published peak (bench.measure.device_peak)."""
    model_config = ConfigDict(extra="forbid")
    unit: Literal["TFLOP/s"]
    model_tflops_per_device: float | None = Field(description="summary.model_tflops_per_gpu")
    precision: str
    measured_peak_tflops: float | None = Field(
        description="best sustained GEMM rate `bench peak` measured on this host and device at this precision")
    measured_peak_source: str = Field(description="the peak file read, or why there is none")
    mfu_measured: float | None = Field(description="model_tflops_per_device / measured_peak_tflops (a fraction)")
    spec_peak_tflops: float | None = Field(
        description="the vendor's dense rate for this exact GPU name and precision; none for an unlisted device")
    spec_peak_source: str
    mfu_spec: float | None = Field(description="model_tflops_per_device / spec_peak_tflops (a fraction)")
    definitions: dict[str, str]


class RunSettings(_Open):
    """The resolved run configuration a result ran with (bench.config.RunConfig, every field of it; those the
    readers match runs by are declared here, each with the default a record older than it means)."""
    model: str
    precision: str
    batch_size: int
    device: str = "cpu"
    steps_per_window: int | None = None
    warmup_steps: int | None = None
    image_size: int | None = None
    seq_len: int | None = None
    num_classes: int | None = None
    strategy: str | None = Field(None, description="tf-native's: mirrored, multiworker, ps")
    fp16_allreduce: bool | None = None
    channels_last: bool | None = None
    compile: str | None = None
    fused_optimizer: bool | None = None
    xla: bool | None = None
    profile: str | None = None
    data: str | None = None
    epochs: int | None = None
    target_accuracy: float | None = None
    seed: int | None = None

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")


class Result(BaseModel):
    """One benchmark run: configuration, environment, raw samples and the figures derived from them."""
    model_config = ConfigDict(extra="forbid", title="hvdbench result")
    schema_version: Literal[3]
    run_id: str
    status: Literal["ok"]
    created_utc: str
    hvdbench_version: str
    mode: str
    config: RunSettings = Field(description="the resolved run configuration (bench.config.RunConfig)")
    launcher: str
    world_size: int
    processes: int
    replicas_per_process: int
    workload: Workload
    environment: Environment
    timing: Timing
    samples: Samples
    summary: Summary
    telemetry: Telemetry
    traffic: Traffic | None = None  # added within schema 2: results written before it have none
    utilisation: Utilisation | None = None  # added within schema 2: results written before it have none
    attribution: Attribution | None = None  # added within schema 2; none for one process or --attribution-steps 0
    input: Input | None = None  # added within schema 3: results written before it trained on synthetic data
    training: Training | None = None  # added within schema 3: none unless the run trained to a goal (--epochs)
    host_load: HostLoad | None = None  # added within schema 3: none before it, or where /proc could not be read
    trace: Trace | None = None  # added within schema 3: none unless the run was traced (--trace)
    measurements: dict[str, dict[str, Any]] | None = Field(
        None, description="added within schema 3: the section of each tracker the model does not name (a plugin's, "
                          "bench.measure.tracker), by the tracker's name")
    sync: Sync
    _file: str | None = PrivateAttr(None)  # where it was read from (bench.records.collect); None for a fresh run

    @property
    def file(self) -> str | None:
        """The file this result was read from; None for one not read from a file."""
        return self._file

    @property
    def hosts(self) -> list[str]:
        """The hosts a run's processes ran on: every measuring rank's, and every task of a parameter-server
        cluster."""
        return self.environment.hosts


class Finding(_Open):
    """One thing bench diagnose found (bench/commands/diagnose/rules.py)."""
    kind: Literal["device", "pair", "rank", "job", "node"] = Field(
        description="what it is about: a device alone, a pair of nodes, a rank or the whole of the full job, or a "
                    "node found by its pairs")
    where: str = Field(description="the member: node or node/device, node+node, 'rank R (host)', job")
    figure: Any = Field(description="the measured figure (null: it was not measured because the phase failed)")
    expected: Any = Field(description="what it was held against: the peers' median or the baseline's figure")
    rule: str = Field(description="the rule, with its threshold, or the derived check that found it")
    severity: Literal["error", "warning"]
    name: str = Field(description="the figure a rule holds, or the derived check (did-not-run, common-member-of-pairs)")
    against: Literal["peers", "baseline", "value"] | None = Field(
        description="what a rule held the figure against (the peers' median, the baseline's figure, or the rule's own "
                    "bound: a value rule); null for a derived check")
    why: str | None = Field(None, description="telemetry's explanation where there is one (GPU throttle reasons)")


class DiagnosePhase(_Open):
    seconds: float = Field(description="wall time of the phase")
    steps: list[dict[str, Any]] = Field(description="every command of the phase: members, command, exit code, "
                                                    "seconds, failure (one line) and log")


class NodeAccept(BaseModel):
    """One node's verdict (bench/commands/diagnose/rules.py accept): SuperBench's Accept column."""
    model_config = ConfigDict(extra="forbid")
    node: str
    accepted: bool = Field(description="no error finding names the node, its devices or its ranks")
    errors: list[str] = Field(description="the rules (or derived checks) that rejected it")
    warnings: list[str]


class Diagnose(BaseModel):
    """One bench diagnose: the phases run, every member's figures, the rules and what they found."""
    model_config = ConfigDict(extra="forbid", title="hvdbench diagnose record")
    kind: Literal["diagnose"]
    schema_version: Literal[1]
    run_id: str
    created_utc: str
    hvdbench_version: str
    config: dict[str, Any]
    executor: Literal["slurm", "hosts"] = Field(description="srun steps in an allocation, or ssh and mpirun -H")
    nodes: list[str]
    left_out: list[str] = Field(description="nodes whose devices phase failed, left out of the phases after it")
    seconds: float
    phases: dict[str, DiagnosePhase]
    figures: dict[str, dict[str, dict[str, Any]]] = Field(
        description="kind -> member -> figure: device samples_per_sec; pair busbw_GBps (large size) and latency_us "
                    "(small size); rank compute_s (attribution); job samples_per_sec")
    rules: list[str]
    baseline: str | None
    findings: list[Finding]
    passed: bool = Field(description="no finding is an error (the exit status is then 0)")
    accept: list[NodeAccept] | None = Field(None, description="per node, accepted or not and why; records written "
                                            "before it have none")


def record_model(kind: str) -> type[BaseModel]:
    """The model of a record kind (bench.records.store.Kind's values): a run's result and diagnose's record here,
    every other kind's in bench.records.kinds."""
    return {"result": Result, "diagnose": Diagnose, "verify": kinds.Verify, "allreduce": kinds.Allreduce,
            "peak": kinds.Peak, "diagnose-baseline": kinds.Baseline, "data-bench": kinds.DataBench,
            "converge": kinds.Converge, "tune": kinds.Tune,
            "soak": kinds.Soak}[kind]  # tests/unit/test_schema.py: one for every Kind


def json_schema(kind: str = "result") -> dict[str, Any]:
    return record_model(kind).model_json_schema()


def mismatch(data: dict[str, Any], kind: str) -> str | None:
    """Where ``data`` first departs from the model of ``kind``, in one line; None when it matches."""
    try:
        record_model(kind).model_validate(data)
    except ValidationError as exc:
        return first_problem(exc)
    return None


def validate(data: Any, where: str = "result") -> None:
    """One clear error when ``data`` is not a result of this schema version."""
    if not isinstance(data, dict):
        raise BenchError(f"{where} is not a JSON object")
    if "schema_version" not in data:
        raise BenchError(f"{where} is not an hvdbench result (it has no schema_version)")
    if data["schema_version"] != SCHEMA_VERSION:
        raise BenchError(f"{where} has schema_version {data['schema_version']}; this hvdbench reads 1 to "
                         f"{SCHEMA_VERSION} (a newer version wrote it?)")
    problem = mismatch(data, "result")
    if problem:
        raise BenchError(f"{where} does not match the result schema: {problem}")


_V1_SUMMARY = {"images_per_sec_total": "samples_per_sec_total", "images_per_sec_per_gpu": "samples_per_sec_per_gpu",
               "images_per_sec_rank0_x_world": "samples_per_sec_rank0_x_world",
               "images_per_sec_wall_train": "samples_per_sec_wall_train",
               "images_per_sec_wall_total": "samples_per_sec_wall_total",
               "windows_total_images_per_sec": "windows_total_samples_per_sec"}
_V1_TELEMETRY = {"energy_per_image_j": "energy_per_sample_j", "images_per_sec_per_watt": "samples_per_sec_per_watt"}
_V1_HOOK_FIELDS = ("verify_dir", "data_shards", "fault")  # bench verify's requests, now bench.hooks


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A result of an older schema as the current one: 1 -> 2 -> 3."""
    if isinstance(data, dict) and data.get("schema_version") == 1:
        data = _upgrade_1(data)
    if isinstance(data, dict) and data.get("schema_version") == 2:
        data = _upgrade_2(data)
    return data


# What follows the headline throughput in a result: each is proportional to it (bench.records.results).
_FOLLOW_HEADLINE = (("summary", "tokens_per_sec_total"), ("summary", "tokens_per_sec_per_gpu"),
                    ("summary", "model_tflops_per_gpu"), ("telemetry", "samples_per_sec_per_watt"),
                    ("utilisation", "model_tflops_per_device"), ("utilisation", "mfu_measured"),
                    ("utilisation", "mfu_spec"))


def _upgrade_2(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 -> 3: the attribution's step_s is the fastest window (was the median) and exposed_s is never
    negative (bench.measure.attribution), recomputed from the raw windows; and the headline throughput changed
    meaning, from the mean of the per-window rates (biased
    upward) to every timed sample over the slowest rank's total time (bench.measure.stats), with the interval from
    that rank's window times. Recomputed from the raw window times every result keeps; each figure proportional
    to it (tokens/s, model TFLOP/s, MFU, samples/s per watt) is scaled by the same ratio."""
    out = dict(data, schema_version=3, summary=dict(data.get("summary") or {}))
    samples, summary = data.get("samples") or {}, out["summary"]
    windows, per_rank = samples.get("window_s"), samples.get("samples_per_window_per_rank")
    old = summary.get("samples_per_sec_total")
    if not windows or not per_rank or not old:
        return out  # validation names what is missing
    headline, ci = ratio_of_totals(windows, len(windows) * per_rank)
    ratio = headline / old
    summary.update(samples_per_sec_total=headline, samples_per_sec_per_gpu=headline / (data.get("world_size") or 1),
                   ci95=ci, ci95_kind="within-run")
    for part, key in _FOLLOW_HEADLINE:
        section = out.get(part)
        if isinstance(section, dict) and isinstance(section.get(key), (int, float)):
            out[part] = section = dict(section)
            section[key] *= ratio
    attribution = out.get("attribution")
    if isinstance(attribution, dict) and attribution.get("per_rank") and samples.get("steps_per_window"):
        # step_s was the median window, exposed_s could go negative: both as bench.measure.attribution has them now
        ranks = []
        step = job_step(windows, samples["steps_per_window"])
        for entry in attribution["per_rank"]:
            exposed = max(0.0, step - entry["compute_s"])
            hidden = (min(1.0, max(0.0, 1.0 - exposed / entry["exchange_s"])) if entry["exchange_s"] > 0 else None)
            ranks.append(dict(entry, step_s=step, exposed_s=exposed, hidden_share=hidden,
                              exposed_clipped=step < entry["compute_s"]))
        shares = sorted(r["hidden_share"] for r in ranks if r["hidden_share"] is not None)
        out["attribution"] = dict(attribution, per_rank=ranks,
                                  exposed_s_median=statistics.median(r["exposed_s"] for r in ranks),
                                  hidden_share_median=statistics.median(shares) if shares else None)
    return out


def _upgrade_1(data: dict[str, Any]) -> dict[str, Any]:
    """A schema-1 result as schema 2 (same figures, new names, the image workload made explicit)."""
    out = dict(data, schema_version=2)
    out["summary"] = {_V1_SUMMARY.get(k, k): v for k, v in data.get("summary", {}).items()}
    out["summary"]["unit"] = "samples/s"
    out["telemetry"] = {_V1_TELEMETRY.get(k, k): v for k, v in (data.get("telemetry") or {}).items()}
    samples = dict(data.get("samples", {}))
    if "images_per_window_per_rank" in samples:
        samples["samples_per_window_per_rank"] = samples.pop("images_per_window_per_rank")
    out["samples"] = samples
    config = {k: v for k, v in data.get("config", {}).items() if k not in _V1_HOOK_FIELDS}
    out["config"] = config
    spec = MODELS.get(config.get("model", ""))
    classes = config.get("num_classes", 1000)
    out["workload"] = {"kind": "image", "unit": "image", "symbol": "img/s", "model": config.get("model", "?"),
                       "parameters": spec.parameters(classes) if spec else None,
                       "gradient_bytes": spec.gradient_bytes(classes) if spec else None,
                       "train_flops_per_sample": None, "tokens_per_sample": None}
    return out
