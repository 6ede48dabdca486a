"""bench verify: do the distributed modes train exactly what one process training on the global batch trains?

For a model and k steps, every distributed mode of a framework runs through its normal code path
(launcher, rendezvous, wrapping, compiled step) with

* identical initial weights (same seed; Horovod also broadcasts from rank 0), checked, not assumed;
* identical per-rank data: rank r trains on data shard r (the same shard in every mode);
* non-determinism removed as far as the framework allows: dropout off, deterministic kernels
  (``torch.use_deterministic_algorithms``, ``tf.config.experimental.enable_op_determinism``), no TF32.

The reference is the framework's single-device mode trained on the concatenation of the shards, that
is the global batch, with the loss averaged over it: synchronous data parallelism with averaged
gradients is mathematically the same update. Each mode's final parameters w are compared with the
reference's w_ref, whose own training moved them from w0::

    max_abs     = max_i |w_i - w_ref,i|                                     over every parameter
    max_rel     = max over tensors t of ||w_t - w_ref,t||_inf / ||w_ref,t||_inf
    of_update   = max_abs / max_i |w_ref,i - w0_i|     (the difference relative to what training changed)

PASS when the initial weights were identical, the ranks ended in sync, training moved the weights
and ``of_update <= tolerance``. A mode that skipped the gradient allreduce would be off by the order
of the update itself (of_update ~ 1), so the test separates bugs from rounding by orders of magnitude.

Expected sources of difference (why the tolerance is not 0):
* reduction order: the allreduce adds per-rank gradients in another order (ring, tree, fusion
  buffers) than one process summing the whole batch, and float addition is not associative:
  about 1e-7 relative per step, growing over steps;
* ``--fp16-allreduce`` rounds every gradient to 11 significant bits (~5e-4 relative) before averaging;
* across frameworks: other convolution and reduction kernels, so rounding differs likewise.

Across frameworks, the PyTorch model's initial weights are loaded into the TensorFlow twin (conv
OIHW -> HWIO, dense transposed, VGG's first dense re-ordered from (C, H, W) to (H, W, C) inputs), both
train single-process on the same batch (NCHW -> NHWC) and the loss trajectories are compared.

Not covered, by construction: models with batch normalisation (each rank normalises with its own
batch's statistics, a real and intended difference from the global batch), and the parameter-server
strategy with more than one worker (asynchronous: there is no synchronous reference), so ps runs with
one worker and is compared with the one-shard reference.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.commands.snapshots import differences, identical, load_parameters
from bench.commands.sweep import last_error, run_cell
from bench.commands.verify_cross import cross_framework
from bench.config import Device, RunConfig, check_option, cli_options, comma_list, option
from bench.distributed import hvdist
from bench.errors import BenchError, MissingDependency, restore_handlers, stop_on_signals
from bench.hooks import FAULTS, Hooks
from bench.launching import envs
from bench.launching.detect import detect
from bench.launching.slurm import inside_allocation, srun_command
from bench.models import MODELS
from bench.modes import Variant, variant, variants
from bench.records import store
from bench.records.header import header, new_run_id
from bench.records.kinds import Verify, VerifyRow
from bench.records.results import check_output_dir, load_result
from bench.records.schema import Result
from bench.run import run
from bench.tables import never_cut

FRAMEWORK_NAMES = {"torch": "torch", "tf": "tensorflow"}  # --framework's words -> bench.modes.FRAMEWORKS
TOLERANCE = 1e-3  # of_update, fp32 gradients (measured: reduction order gives ~1e-5 or less)
FP16_TOLERANCE = 1e-2  # of_update with --fp16-allreduce (measured: ~4e-4 after 3 steps)


@dataclass(frozen=True)
class VerifyConfig:
    """bench verify's configuration: each option declared once, here (the command's flags come from it)."""
    framework: str = option("both", "torch, tf or both (both adds PyTorch vs TensorFlow).")
    modes: tuple[str, ...] = option((), "Comma-separated subset, e.g. torch-ddp,tf-native:ps (default: every "
                                    "distributed mode of the framework).", parse=comma_list, shown="")
    model: str = option("vgg16", "A model without batch normalisation: vgg16, vgg19, transformer-small, "
                        "transformer-base.")
    steps: int = option(3, "Training steps per run.")
    np: int = option(2, "Ranks of the distributed runs.", flag="--np", aliases=("-np",))
    batch_size: int = option(2, "Images per rank per step.")
    image_size: int | None = option(None, "Square image side (image models; default 32).")
    seq_len: int | None = option(None, "Tokens per sequence (text models; default 8).")
    num_classes: int = option(10, "Classifier outputs.")
    device: Device = option(Device.auto, "Where the runs train.")
    seed: int = option(42, "Seed for weights and data.")
    fp16_allreduce: bool = option(False, "Compress gradients to fp16 (modes that can); the tolerance widens.",
                                  flag="--fp16-allreduce")
    sparse_embeddings: bool = option(False, "Text models: an untied output projection and a sparse embedding "
                                     "gradient.", flag="--sparse-embeddings")
    sparse_as_dense: bool = option(False, "With --sparse-embeddings: reduce it as a dense tensor.",
                                   flag="--sparse-as-dense")
    tolerance: float | None = option(None, "Max difference as a fraction of the reference's own update (default "
                                     "1e-3; 1e-2 with --fp16-allreduce).")
    fault: str | None = option(None, "Inject a bug to prove the check fails: skip-allreduce.")
    cross: bool = option(True, "With --framework both, also PyTorch vs TensorFlow from the same weights.",
                         flag="--cross/--no-cross")
    output: str = option("results", "Directory for verify-<id>.json.")
    keep_params: bool = option(False, "Keep the parameter snapshots (.npz).", flag="--keep-params")

    def __post_init__(self) -> None:
        if self.framework not in ("torch", "tf", "both"):
            raise BenchError(f"--framework must be torch, tf or both (got '{self.framework}')")
        verifiable = verifiable_models()
        if self.model not in verifiable:
            raise BenchError(f"verify supports {', '.join(verifiable)}: models with batch normalisation "
                             "normalise each rank's batch on its own, so they differ from the global batch by design")
        known = [v.label for f in FRAMEWORK_NAMES for v in framework_variants(f)]
        for m in self.modes:
            if m not in known:
                raise BenchError(f"verify cannot check mode '{m}' (choose from: {', '.join(known)})")
        if self.steps < 2:
            raise BenchError(f"--steps must be >= 2 (got {self.steps})")
        declared = cli_options()  # the run options verify shares, checked as every run checks them
        for name in ("batch_size", "num_classes", "image_size", "seq_len"):
            check_option(name, getattr(self, name), declared[name])
        if self.np < 2:
            raise BenchError(f"--np must be >= 2: one rank has nothing to average (got {self.np})")
        spec = MODELS[self.model]
        spec.workload.check(spec, self)
        spec.check_embedding(self.sparse_embeddings, self.sparse_as_dense)
        if spec.workload.kind == "image" and self.image_size is None:
            object.__setattr__(self, "image_size", 32)
        if spec.workload.kind == "text" and self.seq_len is None:
            object.__setattr__(self, "seq_len", 8)
        if self.tolerance is not None and not self.tolerance > 0:
            raise BenchError(f"--tolerance must be > 0 (got {self.tolerance})")
        if self.fault is not None and self.fault not in FAULTS:
            raise BenchError(f"unknown fault '{self.fault}' (choose from: {', '.join(FAULTS)})")

    @property
    def frameworks(self) -> list[str]:
        return list(FRAMEWORK_NAMES) if self.framework == "both" else [self.framework]

    @property
    def selected(self) -> list[Variant]:
        chosen = [v for f in self.frameworks for v in framework_variants(f)]
        return [v for v in chosen if not self.modes or v.label in self.modes]

    @property
    def threshold(self) -> float:
        if self.tolerance is not None:
            return self.tolerance
        return FP16_TOLERANCE if self.fp16_allreduce else TOLERANCE


def verifiable_models() -> list[str]:
    """Models without batch normalisation: only they train the same on k ranks as on one global batch."""
    return [name for name, spec in MODELS.items() if not spec.batch_norm]


def framework_variants(framework: str) -> list[Variant]:
    """Every distributed variant of a framework (--framework's word: torch or tf)."""
    return variants(FRAMEWORK_NAMES[framework], distributed=True)


# -- orchestration (the parent process) ----------------------------------------------------------------
@dataclass(frozen=True)
class ModeRun:
    """One verify run: its result, and its parameters before and after training."""
    result: Result
    initial: Any
    final: Any


def _run_mode(vc: VerifyConfig, v: Variant, work: Path, np_: int | None, shards: int | None,
              settings: dict[str, Any] | None = None) -> ModeRun:
    """One ordinary bench run of variant ``v`` for vc.steps steps, with snapshot hooks; its result and snapshots.
    ``settings``: run settings the checked mode asks for itself and its reference alike (ModeSpec.verify_settings)."""
    work.mkdir(parents=True)
    spec = v.mode
    cfg = RunConfig(mode=spec.name, model=vc.model, batch_size=vc.batch_size, image_size=vc.image_size,
                    seq_len=vc.seq_len,
                    num_classes=vc.num_classes, warmup_steps=0, steps_per_window=vc.steps - 1, windows=1,
                    np=np_, device=vc.device, seed=vc.seed, output=str(work / "result"),
                    fp16_allreduce=vc.fp16_allreduce and spec.gradient_compression, telemetry=False,
                    strategy=v.strategy, sparse_embeddings=vc.sparse_embeddings, sparse_as_dense=vc.sparse_as_dense,
                    attribution_steps=0)  # verify judges the parameters: no attribution windows
    if settings:
        cfg = dataclasses.replace(cfg, **settings)
    hooks = Hooks(snapshot_dir=str(work), deterministic=True, data_shards=shards,
                  fault=vc.fault if spec.distributed else None)
    if inside_allocation():
        _srun_mode(v, cfg, hooks, work)
    else:
        run(cfg, hooks)
    results = sorted((work / "result").glob("*.json"))
    if len(results) != 1:
        raise BenchError(f"{v.label} wrote {len(results)} results in {work / 'result'}")
    return ModeRun(load_result(results[0]), load_parameters(work / "initial.npz")[1],
                   load_parameters(work / "final.npz")[1])



def _srun_mode(v: Variant, cfg, hooks: Hooks, work: Path) -> None:
    """Inside a Slurm allocation: the run as one job step on the allocation's nodes (the reference too, so
    that it trains on the same kind of node). The parameter snapshots go to ``work``, which must be on a
    directory every node shares, as --output is."""
    config = work / "config.json"
    config.write_text(cfg.to_json() + "\n")
    log = work / "srun.log"
    old = stop_on_signals()
    try:
        with hooks.exported():
            code = run_cell(srun_command(v, cfg.np or 1, [*envs.bench_command(), "run", str(config)]),
                            log, None)
    finally:
        restore_handlers(old)
    if code != 0:
        raise BenchError(f"srun exited {code}: {last_error(log)} (log {log})")


def _np_for(vc: VerifyConfig, v: Variant) -> int | None:
    """verify's --np, unless the variant fixes its own count (see ModeSpec.verify_np)."""
    return vc.np if v.verify_np == "asked" else v.verify_np


def verify_framework(vc: VerifyConfig, framework: str, work: Path, log) -> list[VerifyRow]:
    references: dict[tuple, ModeRun] = {}  # (shards, settings) -> the reference's run, shared by modes
    return [_verify_mode(vc, v, framework, work, references, log)
            for v in vc.selected if v in framework_variants(framework)]


def _verify_mode(vc: VerifyConfig, v: Variant, framework: str, work: Path, references: dict[tuple, ModeRun],
                 log) -> VerifyRow:
    """One mode's run against its reference's (run once per shard count and settings)."""
    label = v.label
    row = functools.partial(VerifyRow, mode=label, framework=framework)
    if vc.fp16_allreduce and not v.mode.gradient_compression:
        return row(status="SKIP", reason="no gradient compression in this mode")
    if v.mode.token_embedding_only and not MODELS[vc.model].sparse_embeddings:
        return row(status="SKIP", reason=f"trains only models with a token embedding ({vc.model} has none)")
    settings = dict(v.mode.verify_settings)
    log(f"verify: {label} ...")
    try:
        if v.mode.horovod:  # here, before any rank starts (under srun its error would come back as text)
            hvdist.import_hvd(v.mode.framework, label)
        got = _run_mode(vc, v, work / label.replace(":", "-"), _np_for(vc, v), None, settings)
    except MissingDependency as exc:
        return row(status="SKIP", reason=str(exc))
    except BenchError as exc:
        return row(status="FAIL", reason=f"the run failed: {exc}")
    result = got.result
    shards = result.world_size
    key = (shards, tuple(sorted(settings.items())))
    if key not in references:
        reference = variant(v.mode.reference)
        log(f"verify: reference {reference.label} on {shards} shard(s)"
            + (f" with {settings}" if settings else "") + " ...")
        folder = f"{reference.label}-{shards}-shards" + (f"-{len(references)}" if settings else "")
        references[key] = _run_mode(vc, reference, work / folder, 1, shards, settings)
    ref = references[key]
    checked = row(status="PASS", reason=None, world_size=shards, hosts=result.hosts,
                  ranks_in_sync=result.sync.ranks_in_sync, params_changed=result.sync.params_changed,
                  initial_identical=identical(got.initial, ref.initial),
                  **differences(ref.initial, ref.final, got.final), tolerance=vc.threshold)
    problems = [text for ok, text in (
        (checked.initial_identical, "initial weights differ from the reference's"),
        (checked.ranks_in_sync, "ranks ended with different parameters"),
        (checked.params_changed, "training did not change the parameters"),
        (checked.of_update <= vc.threshold, f"difference {checked.of_update:.2e} of the update > "
                                            f"tolerance {vc.threshold:.0e}"),
    ) if not ok]
    if problems:
        checked.status, checked.reason = "FAIL", "; ".join(problems)
    return checked


def run_verify(vc: VerifyConfig, log=None) -> tuple[Verify, Path]:
    """Run every check; write ``verify-<id>.json`` into vc.output; return (report, path)."""
    if detect().launcher != "none":
        raise BenchError("bench verify starts its own ranks for every mode (in a Slurm allocation, through "
                         "srun); run it without a launcher (not under srun, mpirun, torchrun or horovodrun)")
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    out = check_output_dir(vc.output)
    run_id = new_run_id("verify")
    work = out / f".{run_id}-params"
    work.mkdir()
    try:
        rows = []
        for framework in vc.frameworks:
            if any(v in framework_variants(framework) for v in vc.selected):
                rows += verify_framework(vc, framework, work, log)
        cross = None
        if vc.framework == "both" and vc.cross:
            log("verify: PyTorch vs TensorFlow from the same initial weights ...")

            cross = cross_framework(vc)
    finally:
        if not vc.keep_params:
            shutil.rmtree(work, ignore_errors=True)
    report = Verify(
        **header(run_id, store.Kind.VERIFY),
        config={**asdict(vc), "device": vc.device.value, "tolerance": vc.threshold},
        modes=rows,
        cross_framework=cross,
        passed=all(r.status != "FAIL" for r in rows) and (cross is None or cross.status == "PASS"),
        definitions={
            "max_abs": "max |w - w_ref| over every trainable parameter after the steps",
            "max_rel": "max over tensors of ||w - w_ref||_inf / ||w_ref||_inf",
            "of_update": "max_abs / max |w_ref - w0|: the difference relative to the reference's own update",
            "reference": "the single-device mode trained on the concatenation of the ranks' data shards",
        },
        expected_differences=EXPECTED_DIFFERENCES,
        params_kept=str(work) if vc.keep_params else None,
    )
    path = store.write(out / f"{run_id}.json", report)
    return report, path


EXPECTED_DIFFERENCES = [
    "reduction order: the allreduce adds per-rank gradients in another order than one process summing the "
    "global batch; float addition is not associative (about 1e-7 relative per step, growing over steps)",
    "--fp16-allreduce rounds each gradient to 11 significant bits (about 5e-4 relative) before averaging",
    "PyTorch vs TensorFlow: different convolution and reduction kernels round differently",
]


def main(vc: VerifyConfig) -> None:
    """`bench verify`: in the framework's environment, every run; the table, the reasons, exit 1 on FAIL."""
    from rich.console import Console

    if vc.framework in FRAMEWORK_NAMES:
        envs.enter(FRAMEWORK_NAMES[vc.framework])
    elif vc.framework == "both" and envs.split():
        raise BenchError("PyTorch and TensorFlow live in separate environments here (the CUDA image): run "
                         "bench verify --framework torch and --framework tf; the PyTorch-vs-TensorFlow check needs "
                         "both in one environment (the CPU image or the local venv)")
    report, path = run_verify(vc)
    console = Console()
    console.print(render(report))
    for line in reasons(report):
        console.print(line, highlight=False)
    console.print("Expected sources of difference: " + "; ".join(EXPECTED_DIFFERENCES) + ".")
    console.print(f"verify: {path}")
    failed = [r.mode for r in report.modes if r.status == "FAIL"]
    if report.cross_framework and report.cross_framework.status == "FAIL":
        failed.append("torch vs tf")
    if failed:
        raise BenchError(f"verify FAILED for {', '.join(failed)} (see {path})")


def render(report: Verify):
    from rich.table import Table

    cfg = report.config  # the VerifyConfig it ran with
    table = Table("mode", "n", "max abs diff", "max rel diff", "of update", "tolerance", "result",
                  title=f"bench verify: {cfg['model']}, {cfg['steps']} steps, "
                        f"{'fp16' if cfg['fp16_allreduce'] else 'fp32'} allreduce, fault={cfg['fault'] or 'none'}")

    def f(value: float | None, spec: str = ".2e") -> str:
        return "–" if value is None else format(value, spec)

    for r in report.modes:
        table.add_row(r.mode, f(r.world_size, "d"), f(r.max_abs), f(r.max_rel), f(r.of_update),
                      f(r.tolerance, ".0e"), r.status)
    c = report.cross_framework
    if c:
        table.add_row("torch vs tf (loss)", "1", f(c.max_abs_loss), f(c.max_rel_loss), "–", f(c.tolerance, ".0e"),
                      c.status)
    never_cut(table, "mode")
    return table


def reasons(report: Verify) -> list[str]:
    """One line per check that did not PASS: why."""
    checks = [(r.mode, r) for r in report.modes]
    checks += [("torch vs tf", report.cross_framework)] if report.cross_framework else []
    return [f"{mode}: {c.status}: {c.reason}" for mode, c in checks if c.reason]
