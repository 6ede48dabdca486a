"""What both PyTorch modes share: device choice, model, synthetic batch, optimizer, step, checksum."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from bench.data.feed import Feed
from bench.data.loaders import MEAN, STD
from bench.distributed import torchdist
from bench.errors import BenchError
from bench.hooks import Hooks
from bench.launching.detect import LaunchInfo, check_gpus_per_node, own_gpu_indices
from bench.measure import goal
from bench.measure.attribution import sparse_exchange
from bench.models import model as model_spec
from bench.models.torch_loss import loss_fn
from bench.records import env
from bench.vocabulary import Device, Precision

if TYPE_CHECKING:  # the run configuration imports the mode registry to check a run
    from bench.config import RunConfig



CHECKPOINT_FILE = "torch.pt"


def resolve(cfg: RunConfig, launch: LaunchInfo) -> RunConfig:
    """Pick the device and world size; fill the device's defaults."""
    if cfg.is_resolved:
        return cfg
    gpus = torchdist.gpu_count()
    device = "cuda" if torchdist.use_cuda(cfg.device) else "cpu"
    if launch.launcher == "none":
        np = cfg.np or (gpus if device == "cuda" else 2)
        if device == "cuda" and np > gpus:
            raise BenchError(f"--np {np} asks for more ranks than the {gpus} visible GPU(s) on this host")
    else:
        np = launch.world_size
        if cfg.np is not None and cfg.np != np:
            raise BenchError(f"--np {cfg.np} does not match the {np} ranks {launch.launcher} started")
        if device == "cuda":
            check_gpus_per_node(launch, gpus)
    if device == "cpu" and cfg.precision == Precision.amp_fp16:
        raise BenchError("--precision amp-fp16 needs a GPU; on CPU use fp32 or amp-bf16")
    cfg = cfg.resolve(device, np)
    missing = compiles(cfg) and compiler_missing(device)
    if missing:
        raise BenchError(f"--compile {cfg.compile}: TorchInductor builds its kernels with a C compiler and "
                         f"Python's headers, and this machine lacks {missing}; install them (Debian: apt-get "
                         "install g++ python3-dev; both images have them: docs/profiles.md), or run eager "
                         "(--compile none)")
    return cfg


def compiles(cfg: RunConfig) -> bool:
    """Whether the run's model is compiled (--compile, or --tuned's default)."""
    return cfg.compile not in (None, "none")


def compiler_missing(device: str) -> str | None:
    """What TorchInductor would call or include and cannot find, in words; None when nothing is missing: the C++
    compiler of its CPU kernels ($CXX, else g++), or the C compiler Triton builds its GPU launchers with ($CC, else
    gcc or clang), on PATH; and Python.h of the running interpreter, which both compile against (the kernels'
    Python bindings, Triton's launcher)."""
    if device == "cuda":
        names = [os.environ["CC"]] if os.environ.get("CC") else ["cc", "gcc", "clang"]
    else:
        names = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "c++", "clang++"]
    missing = [] if any(shutil.which(n) for n in names) else [" or ".join(names) + " on PATH"]
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.is_file():
        missing.append(str(headers))
    return " and ".join(missing) or None


def compile_arguments(mode: str) -> dict[str, Any]:
    """torch.compile's keyword arguments for --compile MODE."""
    return {"mode": mode}


def score(counts: goal.Counts, out: torch.Tensor, target: torch.Tensor) -> None:
    """Add a held-out batch's hits to ``counts``: per image, or per target token (a text model's (B, L, vocab)
    logits: next-token accuracy over every target token)."""
    out = out.float()
    if out.dim() == 3:
        out, target = out.flatten(0, 1), target.flatten()
    top = out.topk(min(5, out.shape[1]), dim=1).indices
    counts.samples += int(target.numel())
    counts.correct1 += int((top[:, 0] == target).sum())
    counts.correct5 += int((top == target[:, None]).any(dim=1).sum())
    counts.loss_sum += float(torch.nn.functional.cross_entropy(out, target, reduction="sum"))


class DeviceIdle:
    """On a GPU, the time the device sat idle for each batch (bench.data.feed's ``idle_step_s``), on its own clock:
    one CUDA event on the compute stream when the step asks for its batch (``asked``: the previous step's kernels
    are queued before it), one when the batch is handed to the step (``handed``: after the compute stream's wait
    for the copy stream, before the step's first kernel). The device passes the first when the previous step has
    run (or when the host records it, if later), and the second when the batch's copy has run and the host has
    handed the batch over; the time between them is the time this rank's training stream ran nothing for want of
    its batch: ~0 while the host runs ahead of the device (its own wait then overlaps queued work), the gap when
    the loader or the copy is late. Work the hand-over itself queues on the compute stream between the two events
    counts as the input's too: DALI's batch, which DALI writes on the compute stream, and its device-to-device
    copy into the step's tensor. Each reading is deferred until the end of its timed window (no sync per step)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._asked = None

    def asked(self) -> None:
        self._asked = torch.cuda.Event(enable_timing=True)
        self._asked.record(torch.cuda.current_stream(self.device))

    def handed(self):
        asked, ready = self._asked, torch.cuda.Event(enable_timing=True)
        ready.record(torch.cuda.current_stream(self.device))

        def seconds() -> float:
            ready.synchronize()
            return asked.elapsed_time(ready) / 1000
        return seconds

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)


class TorchTrainer:
    """Base for the PyTorch modes; subclasses add the distribution (rendezvous, wrapping, gather)."""
    # --sparse-as-dense: the library densifies the sparse gradient itself (Horovod); otherwise the model's
    # embedding makes a dense gradient to begin with (the same untied model, the same arithmetic).
    densifies_sparse = False
    # --channels-last: the weights in NHWC too (their gradients then are). A channels-last input alone already makes
    # the convolutions pick their NHWC kernels (a weight is converted per call, a small copy beside the activations).
    channels_last_weights = True

    def __init__(self, cfg: RunConfig, launch: LaunchInfo, hooks: Hooks | None = None) -> None:
        self.cfg = cfg
        self.launch = launch
        self.hooks = hooks = hooks or Hooks()
        self.rank = launch.rank
        self.world_size = launch.world_size
        self.replicas_per_process = 1
        self.device = torchdist.pin(cfg.device == Device.cuda, launch)
        if self.device.type == "cuda":
            # fp32 means TF32 tensor-core math on Ampere and newer, as the frameworks default for convs.
            # bench verify wants plain fp32 and deterministic kernels instead.
            fast = not hooks.deterministic
            torch.backends.cuda.matmul.allow_tf32 = fast
            torch.backends.cudnn.allow_tf32 = fast
            torch.backends.cudnn.benchmark = fast
        if hooks.deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read when cuBLAS starts
            torch.use_deterministic_algorithms(True)
        self.scaler = None
        self.feed = None
        self._losses: list[torch.Tensor] = []
        self._copy_stream = None  # --data on a GPU: the side stream the batches are copied on (to_device)
        self._last_copy = None  # the CUDA events around the last batch's copy
        self._pixel_scale = None  # uint8 batches: 255 x ImageNet's mean and deviation on the device (to_device)
        # --compile: the attribution's compute-only step is compiled too, on its first (untimed) call
        self.traces_compute_step = compiles(cfg)
        self._compute_module = None
        # the step's parts as ranges: named ones while --trace's profiler runs (bench.measure.trace), else none
        self.mark = contextlib.nullcontext

    # -- building blocks -------------------------------------------------------------------
    def build_model(self) -> torch.nn.Module:
        cfg = self.cfg
        torch.manual_seed(cfg.seed)  # identical initial weights on every rank
        embedding = cfg.embedding
        if cfg.sparse_as_dense and not self.densifies_sparse:
            embedding = "untied"
        model = model_spec(cfg.model).build_torch(cfg.num_classes, embedding).to(self.device)
        if cfg.channels_last and self.channels_last_weights:
            model = model.to(memory_format=torch.channels_last)
        if self.hooks.deterministic:  # bench verify: no random masks that differ between runs
            for m in model.modules():
                if isinstance(m, torch.nn.Dropout):
                    m.p = 0.0
        model.train()
        # Training's random draws (dropout's masks) from a stream of each rank's own, as each GPU of a real job
        # draws its own: seed + 1 + rank (rank 0's is a single process's), the same on every run.
        torch.manual_seed(cfg.seed + 1 + self.rank)
        return model

    def compile(self, module: torch.nn.Module) -> torch.nn.Module:
        """--compile: ``module`` (the bare model, or the DDP wrapper, as torch's DDP notes advise: its optimizer
        then splits the graph at DDP's buckets, so the exchange still overlaps the backward) compiled in place
        (nn.Module.compile: its parameter names, state dict and wrappers stay as they are). Compilation happens on
        the first call, in the first step: inside init_s, reported apart as compile_s (bench.records.results)."""
        if compiles(self.cfg):
            module.compile(**compile_arguments(self.cfg.compile))
        return module

    def compiled_graphs(self) -> int | None:
        """Graphs TorchDynamo has compiled in this process so far (its own counter); None when nothing compiles.
        The loop reads it around the first step, the warmup steps and the timed windows, and the attribution around
        its timed steps: a graph compiled inside a timed span was timed (bench.measure.loop, attribution)."""
        if not compiles(self.cfg):
            return None
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    def build_data(self, shards: list[int] | None = None) -> None:
        """The synthetic batch of this rank's data shard, or the concatenation of ``shards``; with --data, the
        rank's feed of the dataset instead (each step draws its batch: :meth:`next_batch`)."""
        cfg = self.cfg
        if cfg.data:
            gpu = self.device.type == "cuda"
            self.feed = Feed(cfg, self.rank, self.world_size, self.launch.local_world_size, self.to_device,
                             copies=gpu, framework="torch", device_id=self.device.index,
                             copy_time=self.last_copy_time if gpu else None,
                             device_clock=DeviceIdle(self.device) if gpu else None)
            return
        workload = model_spec(cfg.model).workload
        parts = [workload.torch_batch(cfg, index) for index in (shards or [self.rank])]
        data = torch.cat([d for d, _ in parts])
        target = torch.cat([t for _, t in parts])
        self.data = data.to(self.device)
        if cfg.channels_last:
            self.data = self.data.contiguous(memory_format=torch.channels_last)
        self.target = target.to(self.device)

    def to_device(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """A loader's host batch on the run's device, as a production loop places it: on a GPU the copy is queued
        on a side stream between two CUDA events, and the compute stream waits for that stream's work there, so the
        host goes on at once and the copy overlaps the previous step's kernels. No synchronisation: one per step (as
        before) made the step's timed wait hold the previous step's queued kernels and stopped the host running
        ahead. The copy's device time is read from its events after its window (last_copy_time). A batch of uint8
        pixels (the torch loader's: bench.data.loaders.TorchImages) is normalised on the device after its copy,
        ``(x - 255 mean) / (255 std)`` per channel with ImageNet's mean and deviation, on the side stream on a GPU
        (outside the copy's events: the copy's time is the copy's), in the rank on a CPU (inside the step's data
        wait: the rank does that work there). A batch already on the device (DALI's) is read on the side stream
        only after the compute stream that wrote it."""
        data, target = batch

        def placed(x: torch.Tensor) -> torch.Tensor:
            if x.dtype == torch.uint8:
                if self._pixel_scale is None:  # made once, on the device: (1, 3, 1, 1) each
                    self._pixel_scale = tuple(torch.tensor(v * 255, device=self.device).view(1, 3, 1, 1)
                                              for v in (MEAN, STD))
                mean, std = self._pixel_scale
                x = x.float().sub_(mean).div_(std)
            return x.contiguous(memory_format=torch.channels_last) if self.cfg.channels_last else x

        if self.device.type != "cuda":
            return placed(data.to(self.device)), target.to(self.device)
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(self.device)
        compute, copy = torch.cuda.current_stream(self.device), self._copy_stream
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(copy):
            # A tensor the loader left on the device (DALI's GPU output, written on the compute stream): the copy
            # stream reads it only after that write, and its memory is not reused before those reads end
            # (docs/data-pipelines.md, the streams).
            on_device = [x for x in (data, target) if x.device.type == "cuda"]
            if on_device:
                copy.wait_stream(compute)
                for x in on_device:
                    x.record_stream(copy)
            start.record()
            data = data.to(self.device, non_blocking=True)
            target = target.to(self.device, non_blocking=True)
            end.record()
            data = placed(data)
        compute.wait_stream(copy)
        # made on the copy stream, used on the compute stream: their memory is not reused before that use ends
        data.record_stream(compute)
        target.record_stream(compute)
        self._last_copy = (start, end)
        return data, target

    def last_copy_time(self):
        """The last batch's copy as a reading deferred until its events have completed: a function that gives the
        copy's seconds on the device's clock (bench.data.feed reads it after its timed window's synchronisation)."""
        start, end = self._last_copy

        def seconds() -> float:
            end.synchronize()  # this copy alone, when it is read (after its window): it has long finished
            return start.elapsed_time(end) / 1000
        return seconds

    def next_batch(self) -> None:
        """With --data, the step's batch from the feed; the synthetic batch stays where it is otherwise."""
        if self.feed is not None:
            self.data, self.target = self.feed.next()

    def build_optimizer(self, params) -> torch.optim.Optimizer:
        cfg = self.cfg
        if cfg.optimizer == "adagrad":  # the accumulator from 0, as fbgemm's fused kernel and Keras here start it
            # a sparse embedding's gradient: Adagrad builds sparse tensors of its own, valid by construction, and
            # torch warns at each until told whether to check them
            torch.sparse.check_sparse_tensor_invariants.disable()
            return torch.optim.Adagrad(params, lr=cfg.learning_rate, eps=goal.ADAGRAD_EPS,
                                       weight_decay=cfg.weight_decay or 0.0, fused=bool(cfg.fused_optimizer) or None)
        return torch.optim.SGD(params, lr=cfg.learning_rate, momentum=cfg.momentum,
                               weight_decay=cfg.weight_decay or 0.0, fused=bool(cfg.fused_optimizer) or None)

    # -- training to a goal (bench.measure.goal) ------------------------------------------------
    def set_learning_rate(self, rate: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = rate

    def track(self, loss: torch.Tensor) -> None:
        """Keep the step's training loss (on the device, no sync) when the run trains to a goal."""
        if self.cfg.epochs is not None:
            self._losses.append(loss.detach().float())

    # -- checkpoints (bench.measure.checkpoint) ------------------------------------------------
    def save_state(self, folder) -> None:
        """Rank 0 writes the model's, optimizer's and scaler's state (the ranks hold the same), and every rank's random
        state (CPU, and its GPU's where it trains on one: each rank draws its own dropout masks)."""
        rng = self.allgather({"cpu": torch.get_rng_state(),
                              "cuda": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None})
        if self.rank == 0:
            module = getattr(self.model, "module", self.model)
            torch.save({"model": module.state_dict(), "optimizer": self.optimizer.state_dict(),
                        "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                        "rng": rng}, folder / CHECKPOINT_FILE)

    def load_state(self, folder) -> None:
        """Every rank reads the checkpoint rank 0 wrote (a folder every rank can read) into its model and
        optimizer; the first step's loss, which the checkpoint replaces, is dropped."""
        path = folder / CHECKPOINT_FILE
        if not path.is_file():
            raise BenchError(f"--resume-from {folder}: no {CHECKPOINT_FILE} there (not a PyTorch mode's checkpoint, or "
                             "not on a filesystem this rank reads)")
        # On the CPU: load_state_dict copies each tensor to its parameter's device, and a random state must be a
        # CPU tensor (one loaded onto a GPU makes set_rng_state fail: a resume on a GPU could not start)
        state = torch.load(path, map_location="cpu", weights_only=True)
        getattr(self.model, "module", self.model).load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        mine = state["rng"][self.rank]  # the configuration, so the world size, is the checkpoint's
        torch.set_rng_state(mine["cpu"])
        if mine["cuda"] is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state(mine["cuda"], self.device)
        self._losses = []

    def evaluate_shard(self) -> goal.Counts:
        """This rank's counts on its part of the held-out split (bench.measure.goal), and the mean training loss
        of its steps since the last evaluation."""
        module = getattr(self.model, "module", self.model)  # DDP's forward would start collectives
        counts = goal.Counts()
        module.eval()
        with torch.inference_mode(), self.autocast():
            for data, target in self.feed.held_out():
                out = module(data)
                score(counts, out[0] if isinstance(out, tuple) else out, target)
        module.train()
        return self.with_train_loss(counts)

    def with_train_loss(self, counts: goal.Counts) -> goal.Counts:
        """``counts`` and the mean training loss of this rank's steps since the last evaluation."""
        losses, self._losses = self._losses, []
        counts.train_loss = float(torch.stack(losses).mean()) if losses else None
        return counts

    def autocast(self):
        p = self.cfg.precision
        if p == Precision.fp32:
            return contextlib.nullcontext()
        dtype = torch.float16 if p == Precision.amp_fp16 else torch.bfloat16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    # -- Trainer protocol ------------------------------------------------------------------
    def step(self) -> None:
        mark = self.mark
        with mark("data"):
            self.next_batch()
        self.optimizer.zero_grad()  # set_to_none=True is torch's default
        with mark("forward"), self.autocast():
            loss = loss_fn(self.model(self.data), self.target, self.cfg.label_smoothing)
        self.track(loss)
        with mark("backward"):
            (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        with mark("optimizer"):
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()

    # -- per-rank attribution (bench.measure.attribution) -------------------------------------------
    def attribution_unsupported(self) -> str | None:
        return sparse_exchange(self.cfg)

    def compute_step(self) -> None:
        """The step without its gradient exchange: forward and backward on the bare module, the gradients taken
        with autograd.grad (no gradient is accumulated, so no exchange hook of DDP or Horovod fires), then the
        run's own optimizer's update on them (Horovod's without its synchronize)."""
        module = getattr(self.model, "module", self.model)  # DDP wraps the model
        params = [p for p in module.parameters() if p.requires_grad]
        forward = module
        if compiles(self.cfg) and module is not self.model:  # DDP compiled whole: the bare model compiled apart
            if self._compute_module is None:
                self._compute_module = torch.compile(module, **compile_arguments(self.cfg.compile))
            forward = self._compute_module
        self.optimizer.zero_grad()
        with self.autocast():
            loss = loss_fn(forward(self.data), self.target)
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        for p, g in zip(params, torch.autograd.grad(loss, params), strict=True):
            p.grad = g
        skip = getattr(self.optimizer, "skip_synchronize", contextlib.nullcontext)  # Horovod's optimizer
        with skip():
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()

    def gradient_buffers(self, dtype) -> list[torch.Tensor]:
        """One dense buffer per trainable parameter, as the exchange sends them (the exchange-only windows)."""
        if getattr(self, "_buffers", None) is None:
            module = getattr(self.model, "module", self.model)
            self._buffers = [torch.zeros(p.shape, dtype=dtype, device=self.device)
                             for p in module.parameters() if p.requires_grad]
        return self._buffers

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def checksum(self) -> str:
        """SHA-256 over every trainable parameter's bytes, in a fixed order (buffers excluded:
        BatchNorm running statistics are per rank under Horovod by design)."""
        h = hashlib.sha256()
        with torch.no_grad():
            for p in self.parameters():
                h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    def fingerprint(self) -> float:
        with torch.no_grad():
            return float(sum(p.detach().double().sum() for p in self.parameters()))

    def parameters(self):
        return self.model.parameters()

    def parameter_arrays(self) -> list[tuple[str, Any]]:
        """Every trainable parameter as (name, float32 numpy array), in definition order."""
        model = getattr(self.model, "module", self.model)  # DDP wraps the model
        return [(n, p.detach().float().cpu().numpy().copy()) for n, p in model.named_parameters()]

    def device_label(self) -> str:
        if self.device.type == "cuda":
            return f"cuda:{self.device.index} {torch.cuda.get_device_name(self.device)}"
        return f"cpu ({torch.get_num_threads()} threads)"

    def environment(self) -> dict[str, Any]:
        record = env.base()
        record["torch"] = env.torch_info()
        return record

    def sync_report(self) -> dict[str, Any] | None:
        return None

    def own_gpus(self) -> list[int]:
        return own_gpu_indices(self.launch, torch.cuda.device_count())

    def teardown(self) -> None:
        pass
