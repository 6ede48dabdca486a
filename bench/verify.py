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

import secrets
import shutil
import sys
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from bench import SCHEMA_VERSION, __version__
from bench.config import FAULTS, Device
from bench.errors import BenchError

VERIFIABLE_MODELS = ("vgg16", "vgg19")  # no batch normalisation
FRAMEWORK_MODES = {
    "torch": ["torch-ddp", "torch-horovod"],
    "tf": ["tf-horovod", "tf-native:multiworker", "tf-native:mirrored", "tf-native:ps"],
}
REFERENCE_MODE = {"torch": "torch-single", "tf": "tf-single"}
FP16_MODES = ("torch-ddp", "torch-horovod", "tf-horovod")  # those with gradient compression
TOLERANCE = 1e-3  # of_update, fp32 gradients (measured: reduction order gives ~1e-5 or less)
FP16_TOLERANCE = 1e-2  # of_update with --fp16-allreduce (measured: ~4e-4 after 3 steps)
CROSS_TOLERANCE = 1e-3  # relative loss difference per step, PyTorch vs TensorFlow


@dataclass(frozen=True)
class VerifyConfig:
    framework: str = "both"  # torch | tf | both
    modes: tuple[str, ...] = ()  # default: every distributed mode of the framework(s)
    model: str = "vgg16"
    steps: int = 3
    np: int = 2
    batch_size: int = 2
    image_size: int = 32
    num_classes: int = 10
    device: Device = Device.auto
    seed: int = 42
    fp16_allreduce: bool = False
    tolerance: float | None = None
    fault: str | None = None
    cross: bool = True  # the PyTorch vs TensorFlow loss trajectory (framework both)
    output: str = "results"
    keep_params: bool = False

    def __post_init__(self) -> None:
        if self.framework not in ("torch", "tf", "both"):
            raise BenchError(f"--framework must be torch, tf or both (got '{self.framework}')")
        if self.model not in VERIFIABLE_MODELS:
            raise BenchError(f"verify supports {', '.join(VERIFIABLE_MODELS)}: models with batch normalisation "
                             "normalise each rank's batch on its own, so they differ from the global batch by design")
        known = [m for ms in FRAMEWORK_MODES.values() for m in ms]
        for m in self.modes:
            if m not in known:
                raise BenchError(f"verify cannot check mode '{m}' (choose from: {', '.join(known)})")
        if self.steps < 2:
            raise BenchError(f"--steps must be >= 2 (got {self.steps})")
        for name in ("np", "batch_size", "num_classes"):
            if getattr(self, name) < 1:
                raise BenchError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        if self.np < 2:
            raise BenchError(f"--np must be >= 2: one rank has nothing to average (got {self.np})")
        if self.image_size < 32:
            raise BenchError(f"--image-size must be >= 32 (got {self.image_size})")
        if self.tolerance is not None and not self.tolerance > 0:
            raise BenchError(f"--tolerance must be > 0 (got {self.tolerance})")
        if self.fault is not None and self.fault not in FAULTS:
            raise BenchError(f"unknown fault '{self.fault}' (choose from: {', '.join(FAULTS)})")

    @property
    def selected(self) -> list[str]:
        frameworks = ["torch", "tf"] if self.framework == "both" else [self.framework]
        chosen = [m for f in frameworks for m in FRAMEWORK_MODES[f]]
        return [m for m in chosen if not self.modes or m in self.modes]

    @property
    def threshold(self) -> float:
        if self.tolerance is not None:
            return self.tolerance
        return FP16_TOLERANCE if self.fp16_allreduce else TOLERANCE


# -- inside a rank: the snapshot bench.run asks for on rank 0 ------------------------------------------
def save_parameters(folder: Path, trainer, when: str) -> None:
    """Write the trainer's parameters to ``folder/<when>.npz`` (rank 0 of a verify run)."""
    pairs = trainer.parameter_arrays()
    tmp = folder / f".{when}.tmp.npz"
    np.savez(tmp, *[a for _, a in pairs], names=np.array([n for n, _ in pairs]))
    tmp.rename(folder / f"{when}.npz")


def load_parameters(path: Path) -> tuple[list[str], list[np.ndarray]]:
    with np.load(path) as data:
        count = len([k for k in data.files if k.startswith("arr_")])
        return [str(n) for n in data["names"]], [data[f"arr_{i}"] for i in range(count)]


# -- comparisons (pure arithmetic, tested on known inputs) ---------------------------------------------
def differences(initial: list[np.ndarray], reference: list[np.ndarray], candidate: list[np.ndarray]) -> dict:
    """max_abs, max_rel and of_update (see the module docstring) of ``candidate`` against ``reference``."""
    if len(candidate) != len(reference) or any(a.shape != b.shape for a, b in zip(candidate, reference, strict=True)):
        raise BenchError("the mode's parameters do not have the reference's shapes")
    max_abs = max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(candidate, reference, strict=True))
    max_rel = max(float(np.max(np.abs(a.astype(np.float64) - b)) / max(float(np.max(np.abs(b))), 1e-30))
                  for a, b in zip(candidate, reference, strict=True))
    update = max(float(np.max(np.abs(b.astype(np.float64) - w0))) for b, w0 in zip(reference, initial, strict=True))
    return {"max_abs": max_abs, "max_rel": max_rel, "max_update": update,
            "of_update": max_abs / update if update > 0 else float("inf")}


def identical(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a, b, strict=True))


# -- orchestration (the parent process) ----------------------------------------------------------------
def _run_mode(vc: VerifyConfig, label: str, work: Path, np_: int | None, shards: int | None) -> dict[str, Any]:
    """One ordinary bench run of ``label`` (mode[:strategy]) for vc.steps steps; its result and snapshots."""
    from bench.config import RunConfig
    from bench.results import load_result
    from bench.run import run

    mode, _, strategy = label.partition(":")
    work.mkdir(parents=True)
    cfg = RunConfig(mode=mode, model=vc.model, batch_size=vc.batch_size, image_size=vc.image_size,
                    num_classes=vc.num_classes, warmup_steps=0, steps_per_window=vc.steps - 1, windows=1,
                    np=np_, device=vc.device, seed=vc.seed, output=str(work / "result"),
                    fp16_allreduce=vc.fp16_allreduce and mode in FP16_MODES, telemetry=False,
                    strategy=strategy or None, verify_dir=str(work), data_shards=shards,
                    fault=None if mode.endswith("-single") else vc.fault)
    run(cfg)
    results = sorted((work / "result").glob("*.json"))
    if len(results) != 1:
        raise BenchError(f"{label} wrote {len(results)} results in {work / 'result'}")
    return {"result": load_result(results[0]), "initial": load_parameters(work / "initial.npz")[1],
            "final": load_parameters(work / "final.npz")[1]}


def _np_for(vc: VerifyConfig, label: str) -> int | None:
    if label == "tf-native:mirrored":
        return None  # every local GPU (one CPU device on CPU): the mode resolves it
    if label == "tf-native:ps":
        return 1  # one worker: asynchronous updates have no synchronous reference beyond that
    return vc.np


def verify_framework(vc: VerifyConfig, framework: str, work: Path, log) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    references: dict[int, dict[str, Any]] = {}
    for label in [m for m in vc.selected if m in FRAMEWORK_MODES[framework]]:
        row: dict[str, Any] = {"mode": label, "framework": framework}
        rows.append(row)
        if vc.fp16_allreduce and label.split(":")[0] not in FP16_MODES:
            row.update(status="SKIP", reason="no gradient compression in this mode")
            continue
        log(f"verify: {label} ...")
        try:
            got = _run_mode(vc, label, work / label.replace(":", "-"), _np_for(vc, label), None)
        except BenchError as exc:
            if "needs Horovod" in str(exc):
                row.update(status="SKIP", reason=str(exc))
            else:
                row.update(status="FAIL", reason=f"the run failed: {exc}")
            continue
        result = got["result"]
        shards = result["world_size"]
        row.update(world_size=shards, ranks_in_sync=result["sync"]["ranks_in_sync"],
                   params_changed=result["sync"]["params_changed"])
        if shards not in references:
            log(f"verify: reference {REFERENCE_MODE[framework]} on {shards} shard(s) ...")
            reference = REFERENCE_MODE[framework]
            references[shards] = _run_mode(vc, reference, work / f"{reference}-{shards}-shards", 1, shards)
        ref = references[shards]
        row["initial_identical"] = identical(got["initial"], ref["initial"])
        row.update(differences(ref["initial"], ref["final"], got["final"]))
        row["tolerance"] = vc.threshold
        problems = [text for ok, text in (
            (row["initial_identical"], "initial weights differ from the reference's"),
            (row["ranks_in_sync"], "ranks ended with different parameters"),
            (row["params_changed"], "training did not change the parameters"),
            (row["of_update"] <= vc.threshold, f"difference {row['of_update']:.2e} of the update > "
                                               f"tolerance {vc.threshold:.0e}"),
        ) if not ok]
        row.update(status="FAIL" if problems else "PASS", reason="; ".join(problems) or None)
    return rows


def run_verify(vc: VerifyConfig, log=None) -> tuple[dict[str, Any], Path]:
    """Run every check; write ``verify-<id>.json`` into vc.output; return (report, path)."""
    from bench.launch import detect
    from bench.results import check_output_dir, write_json_new

    if detect().launcher != "none":
        raise BenchError("bench verify starts its own ranks for every mode; run it without a launcher "
                         "(not under srun, mpirun, torchrun or horovodrun)")
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    out = check_output_dir(vc.output)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    run_id = f"{stamp}-verify-{secrets.token_hex(4)}"
    work = out / f".{run_id}-params"
    work.mkdir()
    try:
        rows = []
        frameworks = ["torch", "tf"] if vc.framework == "both" else [vc.framework]
        for framework in frameworks:
            if any(m in FRAMEWORK_MODES[framework] for m in vc.selected):
                rows += verify_framework(vc, framework, work, log)
        cross = None
        if vc.framework == "both" and vc.cross:
            log("verify: PyTorch vs TensorFlow from the same initial weights ...")
            from bench.verify_cross import cross_framework

            cross = cross_framework(vc)
    finally:
        if not vc.keep_params:
            shutil.rmtree(work, ignore_errors=True)
    report = {
        "schema_version": SCHEMA_VERSION,
        "kind": "verify",
        "run_id": run_id,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hvdbench_version": __version__,
        "config": {**asdict(vc), "device": vc.device.value, "tolerance": vc.threshold},
        "modes": rows,
        "cross_framework": cross,
        "passed": all(r["status"] != "FAIL" for r in rows) and (cross is None or cross["status"] == "PASS"),
        "definitions": {
            "max_abs": "max |w - w_ref| over every trainable parameter after the steps",
            "max_rel": "max over tensors of ||w - w_ref||_inf / ||w_ref||_inf",
            "of_update": "max_abs / max |w_ref - w0|: the difference relative to the reference's own update",
            "reference": "the single-device mode trained on the concatenation of the ranks' data shards",
        },
        "expected_differences": EXPECTED_DIFFERENCES,
        "params_kept": str(work) if vc.keep_params else None,
    }
    path = write_json_new(out / f"{run_id}.json", report)
    return report, path


EXPECTED_DIFFERENCES = [
    "reduction order: the allreduce adds per-rank gradients in another order than one process summing the "
    "global batch; float addition is not associative (about 1e-7 relative per step, growing over steps)",
    "--fp16-allreduce rounds each gradient to 11 significant bits (about 5e-4 relative) before averaging",
    "PyTorch vs TensorFlow: different convolution and reduction kernels round differently",
]


def render(report: dict[str, Any]):
    from rich.table import Table

    table = Table("mode", "n", "max abs diff", "max rel diff", "of update", "tolerance", "result",
                  title=f"bench verify: {report['config']['model']}, {report['config']['steps']} steps, "
                        f"{'fp16' if report['config']['fp16_allreduce'] else 'fp32'} allreduce, "
                        f"fault={report['config']['fault'] or 'none'}")
    for r in report["modes"]:
        def f(key, r=r):
            return f"{r[key]:.2e}" if isinstance(r.get(key), float) else "–"

        table.add_row(r["mode"], str(r.get("world_size", "–")), f("max_abs"), f("max_rel"), f("of_update"),
                      f"{r['tolerance']:.0e}" if "tolerance" in r else "–", r["status"])
    c = report.get("cross_framework")
    if c:
        table.add_row("torch vs tf (loss)", "1", f"{c['max_abs_loss']:.2e}", f"{c['max_rel_loss']:.2e}", "–",
                      f"{c['tolerance']:.0e}", c["status"])
    return table


def reasons(report: dict[str, Any]) -> list[str]:
    """One line per check that did not PASS: why."""
    rows = list(report["modes"])
    if report.get("cross_framework"):
        rows.append({"mode": "torch vs tf", **report["cross_framework"]})
    return [f"{r['mode']}: {r['status']}: {r['reason']}" for r in rows if r.get("reason")]
