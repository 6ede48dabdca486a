"""bench predict: throughput and scaling efficiency at N GPUs from a 1-GPU step time and the network.

The model (synchronous data parallelism, one ring allreduce of the whole gradient per step)::

    G        gradient bytes per step (parameters x 4; x 2 with --fp16-allreduce)
    m        allreduce calls per step = ceil(G / fusion buffer)   (Horovod 0.28 fuses tensors into 128 MiB)
    t1       measured step time on one GPU at per-GPU batch b
    B        bus bandwidth (busbw, nccl-tests' definition: what `bench allreduce` reports)
    a        latency of one ring step

    t_comm(N) = m * 2 (N - 1) * a  +  2 (N - 1) / N * G / B       (ring allreduce: 2 (N-1) steps, and
                                                                   2 (N-1)/N * G bytes through each link)
              + (N - 1) * a' +  (N - 1) * S / B'                  (sparse gradients, S bytes per rank:
                                                                   a ring allgather, N-1 steps, each
                                                                   link carries the other ranks' S)
              + 3 (N - 1) * a" + (N - 1) / N * R / B"             (torch-hybrid's sharded table: R bytes
                                                                   per rank in three all-to-alls, ids,
                                                                   rows and row gradients; each rank
                                                                   keeps 1/N and sends the rest)
    t_step(N) = t1 + t_comm(N) - hidden(N)
    hidden(N) = min(overlap * t_comm(N), H)                        (overlap: fraction of the allreduce
                                                                   hidden under the backward pass; H: the
                                                                   most that can hide, unbounded if unknown)
    X(N)      = N * b / t_step(N)          images/s, all GPUs
    E(N)      = t1 / t_step(N)             scaling efficiency, X(N) / (N * X(1))

G is the dense part: with sparse embedding gradients (--sparse-embeddings) the embedding leaves it and
travels as S = rows x (4 d_model + index bytes) per rank (bench.measure.traffic). B' and a' come from a
``bench allreduce --op allgather`` measurement (busbw = (N - 1) S / t; a' = its smallest size's time /
(N - 1)); without one, the allreduce's B and a price the allgather too. With ``--gpus-per-node`` and
``--intra-busbw``, N within one node uses the node's own bandwidth. B" and a" come from a ``bench allreduce --op
alltoall`` measurement (busbw = (N - 1) / N x R / t; a" = its smallest size's time / (N - 1)), else B and a.

The overlap is measured, not assumed, when a distributed result with per-rank attribution is given
(``--attribution``, or in ``--sweep`` each mode's smallest n > 1 result): overlap = its median rank's
hidden_share (bench.measure.attribution), carried to N as a share of t_comm(N), and H = the backward pass, taken as 2/3
of the measured compute-only step (backward does twice the forward's matmul work): communication can hide only
behind the backward pass still to run once the first gradient bucket is ready, so never more than all of it.
``--overlap`` overrides the measured share (the default without a measurement is 0.5).

The model knows nothing of stragglers, contention between a rank's compute and its communication
(CPU ranks share cores), or hierarchical and tree algorithms; its error against measurements says
how much those matter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.commands.allreduce import load as load_allreduce
from bench.commands.published import FIGURES, NETWORK, STEP_TIMES
from bench.config import option
from bench.errors import BenchError
from bench.models import model as model_spec
from bench.modes import variant
from bench.records.collect import load_results, table_cells
from bench.records.kinds import Allreduce
from bench.records.results import load_result
from bench.records.schema import Result
from bench.tables import never_cut
from bench.vocabulary import HOROVOD_KNOBS

BYTES_PER_ELEMENT = 4
HOROVOD_FUSION_BYTES = HOROVOD_KNOBS["fusion_threshold"][1]  # Horovod 0.28's default, which the runs leave as it is


@dataclass(frozen=True)
class Inputs:
    step_time_s: float  # t1: one step on one GPU
    batch_size: int  # b: images per GPU per step
    gradient_bytes: int  # G
    busbw_GBps: float  # B, 1 GB = 1e9 bytes
    latency_s: float = 0.0  # a, per ring step
    overlap: float = 0.0
    fusion_bytes: int = HOROVOD_FUSION_BYTES  # 0: the gradient goes as one message
    gpus_per_node: int | None = None
    intra_busbw_GBps: float | None = None
    sparse_bytes: int = 0  # S: a rank's sparse gradient (rows and indices), allgathered
    allgather_busbw_GBps: float | None = None  # B' (None: B)
    allgather_latency_s: float | None = None  # a' (None: a)
    alltoall_bytes: int = 0  # R: a rank's all-to-all bytes per step (torch-hybrid's sharded table)
    alltoall_busbw_GBps: float | None = None  # B" (None: B)
    alltoall_latency_s: float | None = None  # a" (None: a)
    hidden_cap_s: float | None = None  # H: the most communication that can hide (None: no bound)

    def __post_init__(self) -> None:
        checks = [
            (self.step_time_s > 0, f"the 1-GPU step time must be > 0 s (got {self.step_time_s})"),
            (self.batch_size >= 1, f"the batch size must be >= 1 (got {self.batch_size})"),
            (self.gradient_bytes > 0, f"the gradient size must be > 0 bytes (got {self.gradient_bytes})"),
            (self.sparse_bytes >= 0, f"the sparse gradient size must be >= 0 bytes (got {self.sparse_bytes})"),
            (self.alltoall_bytes >= 0, f"the all-to-all size must be >= 0 bytes (got {self.alltoall_bytes})"),
            (self.busbw_GBps > 0, f"--busbw must be > 0 GB/s (got {self.busbw_GBps})"),
            (self.latency_s >= 0, f"--latency-us must be >= 0 (got {self.latency_s * 1e6:g})"),
            (0 <= self.overlap <= 1, f"--overlap must be within [0, 1] (got {self.overlap})"),
            (self.fusion_bytes >= 0, f"--fusion-mib must be >= 0 (got {self.fusion_bytes})"),
            (self.intra_busbw_GBps is None or self.intra_busbw_GBps > 0, "--intra-busbw must be > 0 GB/s"),
            (self.gpus_per_node is None or self.gpus_per_node >= 1, "--gpus-per-node must be >= 1"),
            (self.hidden_cap_s is None or self.hidden_cap_s >= 0, "the hidden-time bound must be >= 0 s"),
        ]
        for ok, text in checks:
            if not ok:
                raise BenchError(text)

    @property
    def messages(self) -> int:
        return math.ceil(self.gradient_bytes / self.fusion_bytes) if self.fusion_bytes else 1


def gradient_bytes(model: str, num_classes: int | None = None, fp16_allreduce: bool = False) -> int:
    """Bytes one step allreduces: every parameter's gradient at ``num_classes`` (default: the model's own classes or
    vocabulary)."""
    spec = model_spec(model)
    return spec.gradient_bytes(num_classes or spec.default_classes, 2 if fp16_allreduce else BYTES_PER_ELEMENT)


def comm_time(inp: Inputs, n: int) -> float:
    """t_comm(N) in seconds (0 for one GPU)."""
    if n < 1:
        raise BenchError(f"GPU counts must be >= 1 (got {n})")
    if n == 1:
        return 0.0
    bw = inp.busbw_GBps
    if inp.gpus_per_node and inp.intra_busbw_GBps and n <= inp.gpus_per_node:
        bw = inp.intra_busbw_GBps
    allreduce = inp.messages * 2 * (n - 1) * inp.latency_s + 2 * (n - 1) / n * inp.gradient_bytes / (bw * 1e9)
    allgather = 0.0
    if inp.sparse_bytes:
        bw_ag = inp.allgather_busbw_GBps or bw
        latency_ag = inp.latency_s if inp.allgather_latency_s is None else inp.allgather_latency_s
        allgather = (n - 1) * latency_ag + (n - 1) * inp.sparse_bytes / (bw_ag * 1e9)
    alltoall = 0.0
    if inp.alltoall_bytes:
        bw_a2a = inp.alltoall_busbw_GBps or bw
        latency_a2a = inp.latency_s if inp.alltoall_latency_s is None else inp.alltoall_latency_s
        alltoall = 3 * (n - 1) * latency_a2a + (n - 1) / n * inp.alltoall_bytes / (bw_a2a * 1e9)
    return allreduce + allgather + alltoall


def hidden_time(inp: Inputs, comm: float) -> float:
    """hidden(N): the overlapped share of t_comm(N), at most H."""
    hidden = inp.overlap * comm
    return hidden if inp.hidden_cap_s is None else min(hidden, inp.hidden_cap_s)


@dataclass(frozen=True)
class Prediction:
    """What the model says for N GPUs (module docstring for the formulas)."""
    gpus: int  # N
    comm_s: float  # t_comm(N)
    step_s: float  # t1 + t_comm(N) - hidden(N)
    samples_per_sec_total: float  # N b / step
    samples_per_sec_per_gpu: float  # b / step
    efficiency: float  # t1 / step


def predict(inp: Inputs, n: int) -> Prediction:
    comm = comm_time(inp, n)
    step = inp.step_time_s + comm - hidden_time(inp, comm)
    return Prediction(gpus=n, comm_s=comm, step_s=step, samples_per_sec_total=n * inp.batch_size / step,
                      samples_per_sec_per_gpu=inp.batch_size / step, efficiency=inp.step_time_s / step)


@dataclass(frozen=True)
class SweepCheck:
    """One mode, setting and N of a sweep: the model's efficiency against the measured T_N / (N T_1)."""
    mode: str
    model: str
    gpus: int
    backend: str  # whose allreduce measurement priced the exchange
    setting: str
    t1_s: float
    gradient_bytes: int
    sparse_bytes: int
    busbw_GBps: float
    latency_s: float
    overlap: float
    overlap_source: str  # given, measured (the attribution of the smallest N > 1) or assumed
    hidden_cap_s: float | None
    predicted_efficiency: float
    measured_efficiency: float

    @property
    def error_points(self) -> float:
        return 100 * (self.predicted_efficiency - self.measured_efficiency)


@dataclass(frozen=True)
class PublishedCheck:
    """One figure of the Horovod paper or its docs (bench.commands.published) against the model."""
    model: str
    gpus: int
    efficiency: float  # the published one
    source: str
    predicted_efficiency: float
    predicted_images_per_sec: float
    inputs: Inputs

    @property
    def error_points(self) -> float:
        return 100 * (self.predicted_efficiency - self.efficiency)


def fit_overlap(inp: Inputs, n: int, efficiency: float) -> float:
    """The overlap that makes E(n) equal ``efficiency`` (may fall outside [0, 1]: the model cannot fit)."""
    comm = comm_time(inp, n)
    if comm == 0 or not efficiency > 0:
        raise BenchError("fitting the overlap needs N > 1 and an efficiency > 0")
    return 1 - (inp.step_time_s / efficiency - inp.step_time_s) / comm


# -- inputs from bench's own measurements -------------------------------------------------------------
BACKWARD_SHARE = 2 / 3  # of a training step's matmul work: backward (input and weight gradients) is twice forward


def overlap_from_attribution(result: Result) -> dict[str, float]:
    """overlap and H from a distributed result's attribution (module docstring); one line if it has none."""
    section = result.attribution
    if result.world_size < 2 or section is None:
        raise BenchError(f"{result.run_id} has no per-rank attribution (a run of 2 or more ranks with "
                         "--attribution-steps >= 1 has one)")
    if not section.measured or not section.per_rank:
        raise BenchError(f"{result.run_id}'s attribution was not measured: {section.reason}")
    if section.hidden_share_median is None:
        raise BenchError(f"{result.run_id}'s attribution has no hidden share (an exchange of 0 s)")
    compute = sorted(p.compute_s for p in section.per_rank)[len(section.per_rank) // 2]
    return {"overlap": section.hidden_share_median, "hidden_cap_s": BACKWARD_SHARE * compute}



def from_result(result: Result) -> dict[str, Any]:
    """t1, b, G and S from a one-GPU bench result (the per-window mean throughput's step time; the gradient's
    dense and sparse bytes as the result computed them, bench.measure.traffic)."""
    if result.world_size != 1:
        raise BenchError(f"--result needs a 1-GPU (world size 1) result, got world size {result.world_size}")
    cfg = result.config
    per_gpu = result.summary.samples_per_sec_per_gpu
    computed = result.traffic.computed if result.traffic is not None else None
    if computed is not None and computed.dense_bytes is not None:
        sizes = {"gradient_bytes": computed.dense_bytes, "sparse_bytes": computed.sparse_bytes_per_rank}
        if computed.alltoall_bytes_per_rank:  # torch-hybrid's sharded table
            sizes["alltoall_bytes"] = computed.alltoall_bytes_per_rank
    else:  # results from before bench.measure.traffic: every gradient dense
        sizes = {"gradient_bytes": gradient_bytes(cfg.model, cfg.num_classes, bool(cfg.fp16_allreduce))}
    return {"step_time_s": cfg.batch_size / per_gpu, "batch_size": cfg.batch_size, **sizes}


@dataclass(frozen=True)
class Link:
    """The network as a bench allreduce record measured it, read near one message size."""
    busbw_GBps: float  # B: at the measured size nearest the message (log scale)
    latency_s: float  # a: per ring step, from the smallest size
    busbw_at_bytes: int
    latency_from_bytes: int


def from_allreduce(result: Allreduce, nbytes: int) -> Link:
    """busbw at the measured size nearest ``nbytes`` (log scale) and the ring-step latency from the
    smallest size: a = t_smallest / (2 (n - 1)) for an allreduce, t_smallest / (n - 1) for an allgather or an
    all-to-all."""
    n = result.world_size
    if n < 2:
        raise BenchError("--allreduce needs a result from 2 or more ranks (busbw is 0 on one)")
    nearest = min(result.rows, key=lambda r: abs(math.log(r.bytes / nbytes)))
    smallest = min(result.rows, key=lambda r: r.bytes)
    steps = 2 * (n - 1) if result.op == "allreduce" else n - 1
    return Link(busbw_GBps=nearest.busbw_GBps, latency_s=smallest.time_s / steps, busbw_at_bytes=nearest.bytes,
                latency_from_bytes=smallest.bytes)


def allgather_inputs(measurement: Allreduce | None, sparse_bytes: int) -> dict[str, float]:
    """B' and a' from an allgather measurement, for a run with sparse gradients (else nothing)."""
    return _second(measurement, sparse_bytes, "allgather")


def alltoall_inputs(measurement: Allreduce | None, alltoall_bytes: int) -> dict[str, float]:
    """B" and a" from an all-to-all measurement, for torch-hybrid's sharded table (else nothing)."""
    return _second(measurement, alltoall_bytes, "alltoall")


def _second(measurement: Allreduce | None, nbytes: int, op: str) -> dict[str, float]:
    if measurement is None or not nbytes:
        return {}
    net = from_allreduce(measurement, nbytes)
    return {f"{op}_busbw_GBps": net.busbw_GBps, f"{op}_latency_s": net.latency_s}


# -- checks against measurements ----------------------------------------------------------------------

def pick_allreduce(label: str, allreduces: list[Allreduce], op: str = "allreduce") -> Allreduce | None:
    """The ``op`` measurement of the backend that carries this mode's gradients (its ModeSpec says which); with
    a single measurement of that op, that one for every mode."""
    allreduces = [a for a in allreduces if a.op == op]
    if len(allreduces) == 1:
        return allreduces[0]
    try:
        backend = variant(label).allreduce
    except BenchError:  # a mode this installation does not know (a plugin's)
        return None
    return next((a for a in allreduces if a.backend == backend), None)


def _collective(label: str) -> bool:
    """Whether the model applies: gradients exchanged by collectives, the hybrid's included (not a parameter
    server, not one process)."""
    try:
        return variant(label).exchange in ("collective", "hybrid")
    except BenchError:  # a plugin's mode: assume collectives
        return True


def check_sweep(results: list[Result], allreduces: list[Allreduce], overlap: float | None,
                fusion_bytes: int) -> list[SweepCheck]:
    """For every (mode, setting) with an n=1 result and n>1 results: predicted vs measured efficiency. The
    overlap: ``overlap`` when given, else measured (the smallest n > 1 result's attribution), else 0.5."""
    chosen, _ = table_cells(results)
    rows = []
    for key, by_n in sorted(chosen.items(), key=lambda kv: str(kv[0])):
        allreduce = pick_allreduce(key.label, allreduces)
        if 1 not in by_n or allreduce is None or not _collective(key.label):
            continue
        base = from_result(by_n[1])
        net = from_allreduce(allreduce, base["gradient_bytes"])
        gather = {**allgather_inputs(pick_allreduce(key.label, allreduces, "allgather"), base.get("sparse_bytes", 0)),
                  **alltoall_inputs(pick_allreduce(key.label, allreduces, "alltoall"), base.get("alltoall_bytes", 0))}
        hiding, source = {"overlap": 0.5 if overlap is None else overlap}, "assumed" if overlap is None else "given"
        if overlap is None:
            try:
                hiding, source = overlap_from_attribution(by_n[min(n for n in by_n if n > 1)]), "measured"
            except BenchError:
                pass
        inp = Inputs(**base, busbw_GBps=net.busbw_GBps, latency_s=net.latency_s, fusion_bytes=fusion_bytes,
                     **hiding, **gather)
        per_gpu_1 = by_n[1].summary.samples_per_sec_per_gpu
        for n, result in sorted(by_n.items()):
            if n == 1:
                continue
            measured = result.summary.samples_per_sec_per_gpu / per_gpu_1
            rows.append(SweepCheck(mode=key.label, model=key.model, gpus=n, backend=allreduce.backend,
                                   setting=key.setting_text(), t1_s=inp.step_time_s, gradient_bytes=inp.gradient_bytes,
                                   sparse_bytes=inp.sparse_bytes, busbw_GBps=inp.busbw_GBps, latency_s=inp.latency_s,
                                   overlap=inp.overlap, overlap_source=source, hidden_cap_s=inp.hidden_cap_s,
                                   predicted_efficiency=predict(inp, n).efficiency, measured_efficiency=measured))
    return rows


def check_published(overlap: float | None = None) -> list[PublishedCheck]:
    """Predicted vs the Horovod figures (bench.commands.published), with the inputs written there."""
    rows = []
    for fig in FIGURES:
        t1 = STEP_TIMES[fig.model]
        inp = Inputs(step_time_s=t1.step_time_s, batch_size=t1.batch_size, gradient_bytes=gradient_bytes(fig.model),
                     busbw_GBps=NETWORK.busbw_GBps, latency_s=NETWORK.latency_s,
                     overlap=NETWORK.overlap if overlap is None else overlap, fusion_bytes=NETWORK.fusion_bytes)
        p = predict(inp, fig.gpus)
        rows.append(PublishedCheck(model=fig.model, gpus=fig.gpus, efficiency=fig.efficiency,
                                   source=fig.source, predicted_efficiency=p.efficiency,
                                   predicted_images_per_sec=p.samples_per_sec_total, inputs=inp))
    return rows


def check_sweep_folder(folder: str, allreduce_paths: list[str], overlap: float | None,
                       fusion_bytes: int) -> list[SweepCheck]:
    """check_sweep on a sweep folder and bench allreduce result files; an error if nothing can be checked."""
    rows = check_sweep(load_results([Path(folder)]), [load_allreduce(a) for a in allreduce_paths], overlap,
                       fusion_bytes)
    if not rows:
        raise BenchError(f"{folder} has no mode with results at 1 and more ranks and an allreduce measurement")
    return rows


# -- inputs from the command line ---------------------------------------------------------------------
def one_gpu_inputs(result_path: str | None, step_time: float | None, images_per_sec: float | None,

                   batch_size: int, model: str, num_classes: int, fp16_allreduce: bool) -> dict[str, Any]:
    """t1, b and G: from a world-size-1 bench result, or from --step-time / --images-per-sec."""
    if result_path is not None:
        return from_result(load_result(result_path))
    if (step_time is None) == (images_per_sec is None):
        raise BenchError("give the 1-GPU speed: --step-time or --images-per-sec (or --result)")
    if images_per_sec is not None and not images_per_sec > 0:
        raise BenchError(f"--images-per-sec must be > 0 (got {images_per_sec})")
    return {"step_time_s": step_time if step_time is not None else batch_size / images_per_sec,
            "batch_size": batch_size, "gradient_bytes": gradient_bytes(model, num_classes, fp16_allreduce)}


def throughput_symbol(result_path: str | None, model: str) -> str:
    """The unit predicted throughput is in: the workload's (img/s for images), from the result or the model."""
    if result_path is not None:
        return load_result(result_path).workload.symbol
    return model_spec(model).workload.symbol


def network_inputs(busbw: float | None, latency_us: float | None, allreduce_paths: list[str],
                   nbytes: int, sparse_bytes: int = 0, alltoall_bytes: int = 0) -> dict[str, float]:
    """B and a (and B', a' for sparse gradients): the flags win over bench allreduce results (one allreduce
    measurement, read near ``nbytes``; optionally one allgather measurement, read near ``sparse_bytes``)."""
    measured = [load_allreduce(path) for path in allreduce_paths]
    by_op: dict[str, Allreduce] = {}
    for m in measured:
        if m.op in by_op:
            raise BenchError(f"give one --allreduce result per operation ({m.op} twice; several only with "
                             "--sweep)")
        by_op[m.op] = m
    net = from_allreduce(by_op["allreduce"], nbytes) if "allreduce" in by_op else None
    bw = busbw if busbw is not None else net.busbw_GBps if net is not None else None
    if bw is None:
        raise BenchError("give the network: --busbw (GB/s) or --allreduce (a bench allreduce result)")
    latency = latency_us * 1e-6 if latency_us is not None else net.latency_s if net is not None else 0.0
    return {"busbw_GBps": bw, "latency_s": latency,
            **allgather_inputs(by_op.get("allgather"), sparse_bytes),
            **alltoall_inputs(by_op.get("alltoall"), alltoall_bytes)}


# -- tables -------------------------------------------------------------------------------------------
def render_prediction(inp: Inputs, gpus: list[int], symbol: str = "img/s"):
    from rich.table import Table

    table = Table("GPUs", "exchange (ms)", "step (ms)", f"{symbol} total", f"{symbol} per GPU", "efficiency",
                  title=f"bench predict: t1 {inp.step_time_s * 1e3:.1f} ms, batch {inp.batch_size}, "
                        f"G {inp.gradient_bytes / 1e6:.1f} MB in {inp.messages} message(s), "
                        + (f"S {inp.sparse_bytes / 1e6:.2f} MB allgathered, " if inp.sparse_bytes else "")
                        + (f"R {inp.alltoall_bytes / 1e6:.2f} MB all-to-all, " if inp.alltoall_bytes else "") +
                        f"busbw {inp.busbw_GBps:.3g} GB/s, latency {inp.latency_s * 1e6:.3g} us, "
                        f"overlap {inp.overlap:.3g}"
                        + (f" (at most {inp.hidden_cap_s * 1e3:.1f} ms hidden)" if inp.hidden_cap_s is not None
                           else ""))
    for n in gpus:
        r = predict(inp, n)
        table.add_row(str(n), f"{r.comm_s * 1e3:.2f}", f"{r.step_s * 1e3:.1f}", f"{r.samples_per_sec_total:.1f}",
                      f"{r.samples_per_sec_per_gpu:.1f}", f"{r.efficiency:.1%}")
    return table


def render_published(rows: list[PublishedCheck]) -> tuple[Any, str]:
    """The table and its mean-absolute-error line."""
    from rich.table import Table

    table = Table("model", "GPUs", "published", "predicted", "error (points)", "source",
                  title="bench predict vs published Horovod figures (inputs: bench/commands/published.py)")
    for r in rows:
        table.add_row(r.model, str(r.gpus), f"{r.efficiency:.1%}", f"{r.predicted_efficiency:.1%}",
                      f"{r.error_points:+.1f}", r.source)
    mae = sum(abs(r.error_points) for r in rows) / len(rows)
    never_cut(table, "model")
    return table, f"mean absolute error: {mae:.1f} points over {len(rows)} figures"


def render_sweep(rows: list[SweepCheck], folder: str):
    from rich.table import Table

    table = Table("mode", "setting", "n", "allreduce", "G / S (MB)", "t1 (s)", "busbw (GB/s)", "latency (us)",
                  "overlap", "measured", "predicted", "error (points)", title=f"bench predict vs {folder}")
    for r in rows:
        table.add_row(r.mode, r.setting, str(r.gpus), r.backend,
                      f"{r.gradient_bytes / 1e6:.2f} / {r.sparse_bytes / 1e6:.2f}", f"{r.t1_s:.3f}",
                      f"{r.busbw_GBps:.3f}", f"{r.latency_s * 1e6:.1f}", f"{r.overlap:.2f} {r.overlap_source}",
                      f"{r.measured_efficiency:.1%}", f"{r.predicted_efficiency:.1%}", f"{r.error_points:+.1f}")
    never_cut(table, "mode", "setting")
    return table


def parse_gpus(text: str) -> list[int]:
    try:
        gpus = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BenchError(f"--gpus needs comma-separated integers (got '{text}')") from None
    if not gpus or any(g < 1 for g in gpus):
        raise BenchError(f"--gpus needs GPU counts >= 1 (got '{text}')")
    return gpus



@dataclass(frozen=True)
class PredictConfig:
    """bench predict's configuration: each option declared once, here (the command's flags come from it)."""
    model: str | None = option(None, "Model whose gradient is allreduced (default vgg16).")
    num_classes: int | None = option(None, "Classifier outputs or vocabulary (changes the gradient size; default: "
                                     "the model's own).")
    step_time: float | None = option(None, "Measured 1-GPU step time, seconds.")
    images_per_sec: float | None = option(None, "Or the measured 1-GPU images/s.")
    batch_size: int = option(64, "Images per GPU per step.")
    result: str | None = option(None, "Take model, batch and 1-GPU step time from a bench result at world size 1.")
    busbw: float | None = option(None, "Bus bandwidth, GB/s (nccl-tests busbw).")
    latency_us: float | None = option(None, "Latency per ring step, microseconds.")
    allreduce: list[str] | None = option(None, "Take busbw and latency from a bench allreduce result, for sparse "
                                         "gradients from an --op allgather one, for torch-hybrid's table from an "
                                         "--op alltoall one (with --sweep: per backend; repeatable).")
    overlap: float | None = option(None, "Fraction of the allreduce hidden under backward, 0..1 (default: measured "
                                   "by --attribution or, with --sweep, by each mode's results; else 0.5).")
    attribution: str | None = option(None, "Take the overlap and its bound from this distributed result's "
                                     "per-rank attribution.")
    fusion_mib: float = option(HOROVOD_FUSION_BYTES / 1024**2, "Fusion buffer, MiB (Horovod 0.28's default and "
                               "bench's runs': 128; 0 = one message).")
    fp16_allreduce: bool = option(False, "Half-size gradients.", flag="--fp16-allreduce")
    gpus: str = option("1,2,4,8,16,32,64,128,256,512", "GPU counts to predict.")
    gpus_per_node: int | None = option(None, "GPUs per node (with --intra-busbw).")
    intra_busbw: float | None = option(None, "Bus bandwidth within a node, GB/s.")
    published: bool = option(False, "Check the model against Horovod's published figures (inputs in "
                             "bench/commands/published.py).", flag="--published")
    sweep: str | None = option(None, "Check against a measured sweep folder (needs --allreduce).")

    def __post_init__(self) -> None:  # the inputs' own checks: Inputs, once they are gathered
        if self.fusion_mib < 0:
            raise BenchError(f"--fusion-mib must be >= 0 (got {self.fusion_mib})")
        if self.sweep is not None:
            if not self.allreduce:
                raise BenchError("--sweep needs --allreduce (a bench allreduce result for the network inputs)")
            if self.attribution is not None:
                raise BenchError("--sweep takes each mode's attribution from its own results; drop --attribution")


def main(cfg: PredictConfig) -> None:
    """Predict images/s and scaling efficiency at N GPUs from a 1-GPU step time and the network (module
    docstring); or check the model against the published figures (--published) or a measured sweep (--sweep)."""
    from rich.console import Console

    console = Console()
    fusion = int(cfg.fusion_mib * 1024**2)
    if cfg.published:  # overlap None: the published inputs' overlap
        console.print(*render_published(check_published(cfg.overlap)))
        return
    if cfg.sweep is not None:
        console.print(render_sweep(check_sweep_folder(cfg.sweep, cfg.allreduce, cfg.overlap, fusion), cfg.sweep))
        return
    model = cfg.model or "vgg16"
    base = one_gpu_inputs(cfg.result, cfg.step_time, cfg.images_per_sec, cfg.batch_size, model, cfg.num_classes,
                          cfg.fp16_allreduce)
    net = network_inputs(cfg.busbw, cfg.latency_us, cfg.allreduce or [], base["gradient_bytes"],
                         base.get("sparse_bytes", 0), base.get("alltoall_bytes", 0))
    hiding = {"overlap": 0.5}
    if cfg.attribution is not None:
        hiding = overlap_from_attribution(load_result(cfg.attribution))
    if cfg.overlap is not None:
        hiding["overlap"] = cfg.overlap
    inp = Inputs(**base, **net, **hiding, fusion_bytes=fusion, gpus_per_node=cfg.gpus_per_node,
                 intra_busbw_GBps=cfg.intra_busbw)
    console.print(render_prediction(inp, parse_gpus(cfg.gpus), throughput_symbol(cfg.result, model)))
