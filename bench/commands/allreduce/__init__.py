"""bench allreduce: the gradient allreduce alone, over message sizes, through each training stack's collective.

Backends (one module each): ``torch`` (torch.distributed: NCCL on GPU, Gloo on CPU), ``horovod-torch``
and ``horovod-tf`` (Horovod's allreduce from either framework: NCCL on GPU, Gloo or MPI on CPU) and
``tf`` (tf.distribute's MultiWorkerMirroredStrategy collective: NCCL on GPU, RING on CPU).

Per size S bytes (float32, S/4 elements), on every rank:

* correctness first (nccl-tests' ``-c``): rank r contributes r+1 everywhere, the SUM must be n(n+1)/2;
* then the buffer is zeroed (values stay finite however often it is summed), ``warmup`` operations run;
* the operation count per sample is chosen so a sample lasts about ``target_sample_s`` (the slowest
  rank's warmup time decides, so every rank runs the same number of collectives);
* ``samples`` samples, each ``iters`` back-to-back operations bounded by a device sync.

Definitions (nccl-tests, doc/PERFORMANCE.md)::

    time    t = the ranks' mean sample time / iters, median over samples      (per operation; nccl-tests'
                default, -a 1: each rank's time averaged over the ranks; the slowest rank's is kept beside it
                as time_slowest_rank_s, which on a straggler can be far above)
    algbw   = S / t                                                              (GB/s, 1 GB = 1e9 bytes)
    busbw   = algbw * 2 (n - 1) / n          the per-link rate a ring allreduce needs: it moves
                                             2 (n - 1) / n * S bytes through every rank's link

busbw is comparable across rank counts and with the hardware's link bandwidth; ``bench predict``
takes it as its bandwidth input. Raw per-rank sample times are kept in the result.

``--op allgather`` measures the collective that carries sparse gradients instead. Each collective is one
object in bench.commands.allreduce.collectives: its algbw bytes, bus factor and correct result.
"""

from __future__ import annotations

import importlib
import json
import math
import socket
import statistics
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.commands.allreduce.collectives import COLLECTIVES, Collective
from bench.config import Device, byte_size, comma_list, option
from bench.errors import BenchError
from bench.launching import envs
from bench.measure import thresholds
from bench.models import MODELS
from bench.records import store
from bench.records.header import header, new_run_id
from bench.records.kinds import Allreduce, AllreduceRow
from bench.records.schema import hosts_in
from bench.run import parent_or_rank, rank_output
from bench.tables import never_cut


@dataclass(frozen=True)
class Backend:
    """A ``--backend``: the module that provides ``make(cfg, launch) -> Comm`` (bench.commands.allreduce.common),
    ``spawn(cfg)`` and ``default_np(cfg)``, and the framework whose environment runs it (the CUDA image keeps the
    frameworks apart). Another package adds one with :func:`register_backend` (bench.plugins)."""
    name: str
    module: str
    framework: str

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


BACKENDS: dict[str, Backend] = {}


def register_backend(spec: Backend) -> Backend:
    BACKENDS[spec.name] = spec
    return spec


for _backend in (
    Backend("torch", "bench.commands.allreduce.torch_dist", "torch"),
    Backend("horovod-torch", "bench.commands.allreduce.horovod_torch", "torch"),
    Backend("horovod-tf", "bench.commands.allreduce.horovod_tf", "tensorflow"),
    Backend("tf", "bench.commands.allreduce.tf_collective", "tensorflow"),
):
    register_backend(_backend)
BYTES_PER_ELEMENT = 4  # float32
def gradient_bytes(model: str) -> int:
    """The fp32 gradient of ``model`` at its own class count (1000 for the CNNs) or vocabulary: what one
    data-parallel step allreduces."""
    spec = MODELS[model]
    return spec.gradient_bytes(spec.default_classes, BYTES_PER_ELEMENT)




def bus_factor(n: int, op: str = "allreduce") -> float:
    return COLLECTIVES[op].bus_factor(n)


def bandwidths(nbytes: int, seconds: float, n: int, op: str = "allreduce") -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes) for ``nbytes`` per rank through collective ``op`` across ``n`` ranks
    in ``seconds`` (bench.commands.allreduce.collectives)."""
    return COLLECTIVES[op].bandwidths(nbytes, seconds, n)


@dataclass(frozen=True)
class AllreduceConfig:
    """bench allreduce's configuration: each option declared once, here (the command's flags come from it)."""
    backend: str = option("torch", "torch, horovod-torch, horovod-tf or tf.")
    op: str = option("allreduce", "allreduce (dense gradients), allgather (sparse gradients: the size is each "
                     "rank's contribution) or alltoall (a sharded table's rows, torch-hybrid: the size is each "
                     "rank's buffer).")
    np: int | None = option(None, "Ranks to spawn when no launcher is around (default: every GPU, else 2).",
                            flag="--np", aliases=("-np",))
    min_bytes: int = option(4096, "Smallest message (4K, 1M, ...).", parse=byte_size, shown="4K")
    max_bytes: int = option(256 * 1024**2, "Largest power-series message.", parse=byte_size, shown="256M")
    factor: int = option(4, "Size multiplier between messages.")
    models: tuple[str, ...] = option(("vgg16", "resnet101", "inception3"), "Also each of these models' fp32 "
                                     "gradient size (comma-separated; empty for none).", parse=comma_list,
                                     shown="vgg16,resnet101,inception3")
    warmup: int = option(2, "Untimed operations per size.")
    samples: int = option(5, "Timed samples per size.")
    target_sample_s: float = option(0.2, "Seconds one sample should last.")
    max_iters: int = 1000
    device: Device = option(Device.auto, "Where the buffers live.")
    output: str = option("results", "Directory for the result JSON.")
    rendezvous_timeout: float = option(120.0, "Seconds to wait for all ranks to meet.")
    thresholds: str = option("", "A threshold pack (TOML, docs/soak.md) over the shipped ones: a one-node run of "
                                 "a pack's shape (its GPUs, its size) is held to its all-reduce floor.")
    sizes: tuple[int, ...] = field(default=())  # filled by resolve()

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise BenchError(f"unknown backend '{self.backend}' (choose from: {', '.join(BACKENDS)})")
        if self.op not in COLLECTIVES:
            raise BenchError(f"unknown --op '{self.op}' (choose from: {', '.join(COLLECTIVES)})")
        if self.backend in COLLECTIVES[self.op].backends_without:
            raise BenchError(f"--backend {self.backend} has no {self.op} (choose another backend)")
        object.__setattr__(self, "device", Device(self.device))
        for m in self.models:
            if m not in MODELS:
                raise BenchError(f"unknown model '{m}' (choose from: {', '.join(MODELS)})")
        if self.min_bytes < BYTES_PER_ELEMENT or self.max_bytes < self.min_bytes:
            raise BenchError(f"need {BYTES_PER_ELEMENT} <= --min-bytes <= --max-bytes "
                             f"(got {self.min_bytes}, {self.max_bytes})")
        if self.factor < 2:
            raise BenchError(f"--factor must be >= 2 (got {self.factor})")
        for name in ("samples", "max_iters"):
            if getattr(self, name) < 1:
                raise BenchError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        if self.warmup < 1:
            raise BenchError(f"--warmup must be >= 1: it sizes the samples (got {self.warmup})")
        if self.np is not None and self.np < 1:
            raise BenchError(f"--np must be >= 1 (got {self.np})")
        if not self.target_sample_s > 0:
            raise BenchError(f"--target-sample-s must be > 0 (got {self.target_sample_s})")

    def resolve(self, np_: int) -> AllreduceConfig:
        sizes, s = [], self.min_bytes
        while s <= self.max_bytes:
            sizes.append(s - s % BYTES_PER_ELEMENT)
            s *= self.factor
        sizes += [gradient_bytes(m) for m in self.models]
        return replace(self, np=np_, sizes=tuple(sorted(set(sizes))))

    @property
    def collective(self) -> Collective:
        return COLLECTIVES[self.op]

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "device": self.device.value})

    @classmethod
    def from_json(cls, text: str) -> AllreduceConfig:
        data = json.loads(text)
        models, sizes = data.pop("models"), data.pop("sizes")
        return cls(**data, models=tuple(models), sizes=tuple(sizes))


@dataclass(frozen=True)
class Timed:
    """What each rank hands the others for one size (pickled by the backend's allgather): its timed samples, in
    seconds per operation, and whether its result was right."""
    samples: list[float]
    correct: bool


def load_backend(name: str) -> ModuleType:
    return BACKENDS[name].load()


def run(cfg: AllreduceConfig) -> Path | None:
    """Spawn the ranks (no launcher around) or be one (under a launcher); rank 0 returns the result path."""
    return parent_or_rank(cfg, Collectives())


class Collectives:
    """``bench allreduce`` as a :class:`bench.run.Job`: the backend's spawner, then each rank's sizes."""

    def spawn(self, cfg: AllreduceConfig, info) -> None:
        module = load_backend(cfg.backend)
        module.spawn(cfg.resolve(module.default_np(cfg) if cfg.np is None else cfg.np))

    def rank(self, cfg: AllreduceConfig, info) -> Path | None:
        module = load_backend(cfg.backend)
        if cfg.np is not None and cfg.np != info.world_size:
            raise BenchError(f"--np {cfg.np} does not match the {info.world_size} ranks {info.launcher} started")
        cfg = cfg.resolve(info.world_size) if not cfg.sizes else cfg
        out_dir = rank_output(cfg, info)
        comm = module.make(cfg, info)
        comm.setup()
        try:
            rows = measure(comm, cfg)
            mine = comm.environment()
            ranks = comm.allgather({"rank": info.rank, "local_rank": info.local_rank,
                                    "host": socket.gethostname(), "device": str(mine.get("device"))})
            environment = {**mine, "ranks": ranks} if info.rank == 0 else None  # only rank 0 writes it
        finally:
            comm.teardown()
        if info.rank != 0:
            return None
        return write(out_dir, build_result(cfg, info, rows, environment))


def measure(comm, cfg: AllreduceConfig) -> list[dict[str, Any]]:
    """Every size on this rank; rank 0 gets the gathered rows (others get theirs, unused)."""
    rows = []
    for nbytes in cfg.sizes:
        count = cfg.collective.elements(nbytes // BYTES_PER_ELEMENT, comm.world_size)
        nbytes = count * BYTES_PER_ELEMENT
        op = comm.prepare(count)
        correct = comm.check(op, count)
        comm.zero()
        warm = []
        for _ in range(cfg.warmup):
            t0 = comm.clock()
            op()
            comm.sync()
            warm.append(comm.clock() - t0)
        slowest_warm = max(comm.allgather(min(warm)))
        iters = max(1, min(cfg.max_iters, math.ceil(cfg.target_sample_s / max(slowest_warm, 1e-9))))
        samples = []
        for _ in range(cfg.samples):
            comm.sync()
            comm.barrier()
            t0 = comm.clock()
            for _ in range(iters):
                op()
            comm.sync()
            samples.append((comm.clock() - t0) / iters)
        gathered: list[Timed] = comm.allgather(Timed(samples, correct))
        comm.release()
        per_sample = [statistics.fmean(rank.samples[i] for rank in gathered) for i in range(cfg.samples)]
        slowest = [max(rank.samples[i] for rank in gathered) for i in range(cfg.samples)]
        t = statistics.median(per_sample)
        algbw, busbw = cfg.collective.bandwidths(nbytes, t, comm.world_size)
        rows.append(AllreduceRow(
            bytes=nbytes, count=count, dtype="float32", iters=iters,
            time_s=t, time_mean_s=statistics.fmean(per_sample), time_min_s=min(per_sample),
            time_slowest_rank_s=statistics.median(slowest),
            algbw_GBps=algbw, busbw_GBps=busbw,
            correct=all(rank.correct for rank in gathered),
            model=next((m for m in cfg.models if gradient_bytes(m) == nbytes), None),
            samples_s_per_rank=[rank.samples for rank in gathered],
        ))
    return rows


def build_result(cfg: AllreduceConfig, info, rows: list[AllreduceRow], environment: dict[str, Any]) -> Allreduce:
    result = _result(cfg, info, rows, environment)
    result.floor = floor(result, thresholds.load(cfg.thresholds or None))
    return result


def floor(result: Allreduce, packs: thresholds.Packs) -> dict[str, Any] | None:
    """The threshold pack's one-node all-reduce floor held against this run, where the run has the floor's shape:
    the allreduce on GPUs, every rank on one host whose GPUs (NVML) are all one model with a floor, as many ranks
    as the floor's GPUs, and a row of the floor's size. Azure's check is nccl-tests' all_reduce_perf at that one
    size (``-b 16G -e 16G``), whose bus bandwidth is defined as busbw here. None where no floor applies."""
    env = result.environment or {}
    gpus = [g.get("name") for g in (env.get("nvml") or {}).get("gpus") or []]
    device = str(env.get("device", "")).lower()  # cuda:0 (torch), cuda (horovod), /gpu:0 (tf)
    if result.op != "allreduce" or not ("cuda" in device or "gpu" in device) or len(hosts_in(env)) != 1 \
            or len(set(gpus)) != 1:
        return None
    model = gpus[0]
    need = [packs.get(model, key) for key in ("allreduce_busbw_gbs_min", "allreduce_bytes", "allreduce_gpus")]
    if None in need or result.world_size != int(need[2].value):
        return None
    row = next((r for r in result.rows if r.bytes == int(need[1].value)), None)
    if row is None:
        return None
    least = need[0]
    return {"model": model, "bytes": row.bytes, "gpus": result.world_size, "busbw_GBps": row.busbw_GBps,
            "floor_GBps": least.value, "pack": least.pack, "source": least.source,
            "passed": row.busbw_GBps >= least.value}


def _result(cfg: AllreduceConfig, info, rows: list[AllreduceRow], environment: dict[str, Any]) -> Allreduce:
    return Allreduce(
        **header(new_run_id(f"{cfg.op}-{cfg.backend}"), store.Kind.ALLREDUCE),
        config={**asdict(cfg), "device": cfg.device.value},
        launcher=info.launcher,
        world_size=info.world_size,
        environment=environment,
        rows=rows,
        all_correct=all(r.correct for r in rows),
        definitions=cfg.collective.definitions,
    )


def write(out_dir: Path, result: Allreduce) -> Path:
    from rich.console import Console

    path = store.write(out_dir / f"{result.run_id}.json", result)
    Console(file=sys.stdout).print(render(result))
    print(f"result: {path}")
    if not result.all_correct:
        bad = [r.bytes for r in result.rows if not r.correct]
        raise BenchError(f"{result.op} returned wrong results at {len(bad)} size(s) ({bad[:3]} bytes ...); see {path}")
    if result.floor:
        f = result.floor
        line = (f"busbw {f['busbw_GBps']:.1f} GB/s at {human_bytes(f['bytes'])} on {f['gpus']} x {f['model']}, "
                f"floor {f['floor_GBps']:.10g} GB/s ({f['pack']}: {f['source']})")
        if not f["passed"]:
            raise BenchError(f"below the floor: {line}; see {path}")
        print(f"floor held: {line}")
    return path


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n} B"


def render(result: Allreduce):
    from rich.table import Table

    env = result.environment
    # Headers short enough that every figure fits whole in 80 columns (a pipe): model = whose gradient this is.
    title = (f"{result.op} {result.backend} ({env.get('transport', '?')}), n={result.world_size}, float32, "
             f"bandwidths in GB/s, hosts {' '.join(hosts_in(env)) or '?'}")
    table = Table("size", "bytes", "model", "iters", "time (us)", "algbw", "busbw", "ok", title=title)
    for r in result.rows:
        table.add_row(human_bytes(r.bytes), str(r.bytes), r.model or "", str(getattr(r, "iters", "?")),
                      f"{r.time_s * 1e6:.1f}", f"{r.algbw_GBps:.3f}", f"{r.busbw_GBps:.3f}",
                      "yes" if r.correct else "NO")
    never_cut(table, "size", "bytes", "model", "iters", "time (us)")
    return table


def main(cfg: AllreduceConfig) -> None:
    """`bench allreduce`: in the backend's framework environment, every size; the table."""
    thresholds.load(cfg.thresholds or None)  # a bad pack is one line before any rank starts
    envs.enter(BACKENDS[cfg.backend].framework)
    run(cfg)


def load(path: str | Path) -> Allreduce:
    """An allreduce result file, checked."""
    data = store.load(path, Allreduce)
    if not data.rows:
        raise BenchError(f"{path} is a bench allreduce record without rows")
    return data
