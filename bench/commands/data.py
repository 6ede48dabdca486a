"""``bench data bench PATH``: the input pipeline alone, no model: images/s (a tokens file: sequences/s and tokens/s)
each loader gives with 1..K workers, so that a user learns before training whether a node can feed its devices.

Each loader runs in a child process of its framework's environment (a TensorFlow process never loads
PyTorch), one after the other. Per worker count, the pipeline reads the training split as a rank of ``--np``
would (its shard: rank 0 of ``--np``, so each worker count reads the same files), ``--warmup`` batches untimed
(the workers start, the page cache fills), then ``--batches`` timed: rate = timed images / their wall time.
``--repeats`` rounds run the worker counts in turn (ABAB: a drift on the machine hits each alike); the table
gives the median rate.

    decode rate per core = the median rate with 1 worker (one core decodes and crops; the main process only
                           collates)
    tokens/s             = sequences/s x --seq-len (the target tokens a sample trains on, as a run counts them)
    cores to feed G GPUs = ceil(G x R / decode rate per core), R the img/s one GPU trains at (--gpu-rate, or
                           the published H100 figures: ResNet-50 at 1895 img/s in TF32 and 2791 with AMP)

A loader that can decode on a GPU (DALI: nvJPEG, its "mixed" decoder) does so where ``--device`` says (auto: where
PyTorch sees one), on GPU 0, and hands each batch over as a CUDA tensor, as a PyTorch run on that GPU gets it; the
clock's two edges then wait for the GPU (torch.cuda.synchronize), so the timed span holds the timed batches' GPU
work too, and nothing per batch. Its rows say ``device`` cuda, and it has no decode rate per core (the GPU decodes).

A loader's figure holds for the machine's own cores: on a shared or throttled node, `bench diagnose` compares
the nodes' pipelines.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

from bench import plugins
from bench.config import comma_list, option
from bench.data import datasets, formats
from bench.data.loaders import LOADERS, installed, loader
from bench.errors import BenchError, Reported, one_line
from bench.launching import envs
from bench.records import store
from bench.records.header import header, new_run_id
from bench.records.kinds import DataBench, DataBenchRow
from bench.records.results import check_output_dir
from bench.vocabulary import Device

# ResNet-50 training throughput per H100 GPU as published by Lambda (img/s): the rates the data must keep up with.
PUBLISHED_GPU_RATES = {"H100 TF32": 1895.0, "H100 AMP": 2791.0}


def _workers(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(x) for x in comma_list(text))
    except ValueError:
        raise BenchError(f"--workers takes a comma-separated list of counts (got '{text}')") from None
    if not counts or min(counts) < 0:
        raise BenchError(f"--workers takes counts >= 0 (got '{text}')")
    return counts


@dataclass(frozen=True)
class DataBenchConfig:
    """bench data bench's configuration: each option declared once, here (the command's flags come from it)."""
    path: str = option("", "The dataset's folder (bench data make writes one).", argument=True)
    loaders: tuple[str, ...] = option(installed(), f"Comma-separated loaders: {', '.join(LOADERS)} (default: "
                                      "those installed here).", parse=comma_list, shown=",".join(installed()))
    workers: tuple[int, ...] = option((1, 2), "Comma-separated worker counts (processes for torch, tf.data "
                                      "threads for tf).", parse=_workers, shown="1,2")
    image_size: int = option(224, "Side of the crops the pipeline makes.")
    seq_len: int = option(128, "A tokens file: tokens per sequence (a sample is 2 x --seq-len + 1 tokens).")
    batch_size: int = option(32, "Images per batch.")
    batches: int = option(8, "Timed batches per measurement.")
    warmup: int = option(2, "Untimed batches first.")
    repeats: int = option(3, "Rounds over every loader and worker count, in turn.")
    np: int = option(1, "Ranks the dataset is sharded for (the measurement reads rank 0's shard).", flag="--np",
                     aliases=("-np",))
    gpus: int = option(8, "GPUs per node to size the cores for.")
    gpu_rate: float | None = option(None, "Images/s one GPU trains at (default: the published H100 ResNet-50 "
                                    "rates, TF32 and AMP).")
    seed: int = option(0, "Seed of the shuffle and the crops.")
    device: Device = option(Device.auto, "Where a loader that can decode on a GPU (dali) decodes: cuda (GPU 0, "
                            "the batches handed over as CUDA tensors), cpu, or auto (cuda where PyTorch sees a GPU). "
                            "The torch and tf loaders decode on the CPU whatever it says.")
    cold: bool = option(False, "Empty the page cache of the dataset's files before each measurement, so that the "
                        "loaders read them from the disk or the network filesystem, as a first epoch over a dataset "
                        "larger than the node's memory does (default: warm, the rounds read cached files).",
                        flag="--cold/--warm")
    output: str = option("results", "Directory for the record.")

    def __post_init__(self) -> None:
        if not self.path:
            raise BenchError("bench data bench needs the dataset's folder: bench data bench PATH")
        for name in self.loaders:
            loader(name)
        spec = formats.detect(self.path)
        unread = [n for n in self.loaders if spec.storage not in LOADERS[n].reads]
        if unread:
            if self.loaders != installed():
                able = [n for n, x in LOADERS.items() if spec.storage in x.reads]
                raise BenchError(f"the {unread[0]} loader does not read {spec.name} datasets ({spec.storage}): "
                                 f"--loaders {','.join(able)}")
            object.__setattr__(self, "loaders", tuple(n for n in self.loaders if n not in unread))  # the default's
        for name in ("image_size", "seq_len", "batch_size", "batches", "repeats", "np", "gpus"):
            if getattr(self, name) < 1:
                raise BenchError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        if self.warmup < 0:
            raise BenchError(f"--warmup must be >= 0 (got {self.warmup})")
        if self.gpu_rate is not None and self.gpu_rate <= 0:
            raise BenchError(f"--gpu-rate must be > 0 img/s (got {self.gpu_rate})")
        try:
            object.__setattr__(self, "device", Device(self.device))  # a run file's or the child's text
        except ValueError:
            raise BenchError(f"--device must be one of {', '.join(d.value for d in Device)} (got "
                             f"'{self.device}')") from None


def gpu_visible() -> bool:
    """Whether PyTorch sees a GPU here (no PyTorch: none)."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def wait_for_gpu() -> None:
    """Until the GPU has done every piece of work queued on it so far."""
    import torch

    torch.cuda.synchronize()


def loader_device(cfg: DataBenchConfig, name: str) -> str:
    """Where loader ``name`` decodes in this measurement: cuda for one that can decode on a GPU where --device
    says cuda, or auto and PyTorch sees a GPU; else cpu. --device cuda without a GPU is refused in one line."""
    if not LOADERS[name].decodes_on_gpu or cfg.device is Device.cpu:
        return "cpu"
    visible = gpu_visible()
    if cfg.device is Device.cuda and not visible:
        raise BenchError(f"--device cuda: no GPU visible to PyTorch here for the {name} loader (--device cpu, or "
                         "auto: the GPU where there is one)")
    return "cuda" if visible else "cpu"


# A loader works ahead of its consumer by up to PREFETCH batches per worker (PyTorch's DataLoader's
# prefetch_factor, DALI's queue depth; tf.data's prefetch is tuned to about that).
PREFETCH = 2
# The fewest timed batches per worker: a measurement spans several of the workers' rounds.
ROUNDS = 4


def lengths(cfg: DataBenchConfig, workers: int) -> tuple[int, int]:
    """(untimed, timed) batches of one measurement at ``workers``: at least the batches the workers prefetched
    before the clock starts (--warmup, or PREFETCH x workers), and at least ROUNDS per worker timed (--batches),
    each rounded up to whole rounds of the workers, which hand their batches over together. The clock then starts
    as the last untimed batch arrives and stops as the last timed one does, so it holds the making of exactly the
    timed batches: none it counts was made before it started (the first untimed batch counted, and the queue the
    workers filled during start-up drained inside the clock, overstated the rate by 14% to 33%)."""
    w = max(workers, 1)
    warmup = math.ceil(max(cfg.warmup, PREFETCH * workers) / w) * w
    timed = math.ceil(max(cfg.batches, ROUNDS * workers) / w) * w
    return warmup, timed


def measure_once(cfg: DataBenchConfig, dataset: datasets.Dataset, name: str, workers: int, round_: int,
                 device: str = "cpu") -> float:
    """Images/s of one loader at one worker count: the untimed batches, then the timed ones (lengths). On
    ``device`` cuda the loader decodes on GPU 0 and hands CUDA tensors over, and each edge of the clock waits for
    the GPU's work queued so far. With --cold every file under the dataset's folder leaves the page cache first
    (posix_fadvise DONTNEED: the kernel drops the file's clean cached pages; a file this user cannot open stays)."""
    if cfg.cold:
        for folder, _, names in os.walk(cfg.path):
            for file in names:
                try:
                    fd = os.open(os.path.join(folder, file), os.O_RDONLY)
                except OSError:
                    continue
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
    on_gpu = {"device": "cuda", "device_id": 0, "framework": "torch"} if device == "cuda" else {}
    batches = loader(name).batches(dataset, "train", cfg.image_size, cfg.batch_size, workers, cfg.seed, 0, cfg.np,
                                   epoch=round_, **on_gpu)

    def now() -> float:
        if on_gpu:
            wait_for_gpu()
        return time.perf_counter()

    warmup, timed = lengths(cfg, workers)
    need = warmup + timed
    t0 = now() if warmup == 0 else None
    t1 = None
    seen = 0
    for i, (images, _) in enumerate(batches):
        if i < warmup:
            if i == warmup - 1:
                t0 = now()
            continue
        seen += int(images.shape[0])
        if i + 1 == need:
            t1 = now()
            break
    if t0 is None or t1 is None or seen < timed * cfg.batch_size:
        raise BenchError(f"{name}: the training split gave fewer than {need} batches of {cfg.batch_size} to rank 0 "
                         f"of {cfg.np} ({warmup} untimed, {timed} timed at {workers} worker(s)): make a larger "
                         "dataset, or lower --batches, --warmup or --batch-size")
    return seen / (t1 - t0)


def cores_needed(per_core: float, gpus: int, gpu_rates: dict[str, float]) -> dict[str, int]:
    """ceil(G x R / decode rate per core), for each GPU rate (module docstring)."""
    return {label: math.ceil(gpus * rate / per_core) for label, rate in gpu_rates.items()}


def loader_rates(cfg: DataBenchConfig, name: str) -> tuple[dict[int, list[float]], str]:
    """One loader's rates per worker count over the rounds, in this process, and where it decoded."""
    dataset = datasets.load(cfg.path, cfg.seq_len)
    device = loader_device(cfg, name)
    rates: dict[int, list[float]] = {w: [] for w in cfg.workers}
    for r in range(cfg.repeats):
        for w in cfg.workers:
            rates[w].append(measure_once(cfg, dataset, name, w, r, device))
            print(f"data: round {r + 1}/{cfg.repeats} {name} ({device}) {w} worker(s): {rates[w][-1]:.1f} "
                  "samples/s", file=sys.stderr, flush=True)
    return rates, device


# A loader measured in a child process of its framework's environment: a TensorFlow process never loads PyTorch.
_CHILD = "import sys; from bench.commands.data import child_main; child_main(sys.argv[1])"


def child_main(config: str) -> None:
    """The child's side: its rates, or the one line its failure is (bench.errors.one_line), as JSON on the last
    line of standard output, so the parent ends as the child would have (no traceback, no class name of a domain
    error); HVDBENCH_DEBUG=1 lets the traceback through instead."""
    try:
        plugins.load()  # a plugin's loader or format, as the parent saw them (HVDBENCH_PLUGINS is inherited)
        cfg = DataBenchConfig(**json.loads(config))
        rates, device = loader_rates(cfg, cfg.loaders[0])
        print(json.dumps({"rates": rates, "device": device}), flush=True)
    except Exception as exc:
        if os.environ.get("HVDBENCH_DEBUG"):
            raise
        line, code = one_line(exc)
        print(json.dumps({"error": line, "exit_code": code}), flush=True)
        sys.exit(code)


def child_rates(cfg: DataBenchConfig, name: str) -> tuple[dict[int, list[float]], str]:
    config = {**asdict(cfg), "loaders": [name]}
    python = envs.interpreter(LOADERS[name].framework)
    done = subprocess.run([*envs.python_command(python), "-c", _CHILD, json.dumps(config)], stdout=subprocess.PIPE,
                          text=True)
    lines = done.stdout.strip().splitlines()
    try:
        said = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        said = {}
    if "error" in said:
        raise Reported(said["error"], said.get("exit_code", 1))
    if done.returncode != 0 or "rates" not in said:
        raise BenchError(f"the {name} loader failed (exit {done.returncode}; its error is above)")
    return {int(w): v for w, v in said["rates"].items()}, said["device"]


def run(cfg: DataBenchConfig) -> DataBench:
    """Every loader in a child process of its own (one at a time, so they never compete for the cores)."""
    dataset = datasets.load(cfg.path, cfg.seq_len)
    tokens = dataset.tokens
    side = dataset.spec.image_side
    if side and cfg.image_size != side:
        print(f"data: {dataset.format} images are {side} x {side}; --image-size resizes them after the crop",
              file=sys.stderr)
    for name in cfg.loaders:  # --device cuda without a GPU: refused before any loader is measured
        if cfg.device is Device.cuda:
            loader_device(cfg, name)
    measured = {name: child_rates(cfg, name) for name in cfg.loaders}
    rates = {name: found[0] for name, found in measured.items()}
    device = {name: found[1] for name, found in measured.items()}
    rows = [DataBenchRow(loader=n, workers=w, device=device[n], images_per_sec=statistics.median(v), raw=v,
                         tokens_per_sec=statistics.median(v) * cfg.seq_len if tokens else None)
            for n in cfg.loaders for w, v in rates[n].items()]
    # the cores to feed GPUs at their published image rates: for images decoded on the CPU only
    per_core = {} if tokens else {n: statistics.median(rates[n][1]) for n in cfg.loaders
                                  if 1 in rates[n] and device[n] == "cpu"}
    gpu_rates = {"given": cfg.gpu_rate} if cfg.gpu_rate else PUBLISHED_GPU_RATES
    return DataBench(
        **header(new_run_id("data-bench"), store.Kind.DATA_BENCH),
        config=asdict(cfg), format=dataset.format, train_samples=len(dataset.train),
        rows=rows, batches={str(w): list(lengths(cfg, w)) for w in cfg.workers}, decode_rate_per_core=per_core,
        cores_to_feed={n: cores_needed(rate, cfg.gpus, gpu_rates) for n, rate in per_core.items()},
        gpu_rates=gpu_rates,
        definitions={
            "images_per_sec": "timed samples (images, or sequences of a tokens file) / their wall time, median "
                              "over the rounds",
            "tokens_per_sec": "a tokens file: images_per_sec x seq_len",
            "batches": "per worker count, the untimed and the timed batches of each measurement: at least "
                       f"--warmup and {PREFETCH} x workers untimed (what the workers prefetched), at least --batches "
                       f"and {ROUNDS} x workers timed, each in whole rounds of the workers; the clock runs from the "
                       "last untimed batch's arrival to the last timed one's",
            "device": "where the loader decoded: cpu, or cuda (GPU 0; the clock's edges wait for the GPU)",
            "decode_rate_per_core": "images_per_sec with 1 worker, for a loader that decoded on the CPU",
            "cores_to_feed": "ceil(gpus x gpu rate / decode_rate_per_core)",
        },
    )


def main(cfg: DataBenchConfig) -> None:
    from rich.console import Console
    from rich.table import Table

    out = check_output_dir(cfg.output)
    record = run(cfg)
    path = store.write(out / f"{record.run_id}.json", record)
    tokens = formats.data_format(record.format).tokens
    shape = f"sequences of {cfg.seq_len}" if tokens else f"{cfg.image_size} x {cfg.image_size}"
    table = Table("loader", "decodes on", "workers", "seq/s (median)" if tokens else "img/s (median)",
                  *(["tokens/s"] if tokens else []), "rounds",
                  title=f"{cfg.path}: {record.format}, {shape}, batch {cfg.batch_size}")
    for row in record.rows:
        table.add_row(row.loader, row.device, str(row.workers), f"{row.images_per_sec:.1f}",
                      *([f"{row.tokens_per_sec:.0f}"] if tokens else []), " ".join(f"{x:.1f}" for x in row.raw))
    console = Console()
    console.print(table)
    for name, needs in record.cores_to_feed.items():
        console.print(f"{name}: {record.decode_rate_per_core[name]:.1f} img/s per core; to feed {cfg.gpus} GPUs: "
                      + ", ".join(f"{n} cores at {record.gpu_rates[k]:g} img/s per GPU ({k})"
                                  for k, n in needs.items()))
    console.print("page cache: emptied of the dataset's files before each measurement (--cold: read from the disk)"
                  if cfg.cold else "page cache: the dataset's files as earlier reads left them (--warm; --cold reads "
                  "them from the disk)")
    console.print(f"record: {path}")
