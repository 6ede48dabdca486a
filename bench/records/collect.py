"""Results read back together, for bench report, compare and predict: the result files under folders (one
bad file skipped with a warning, or fatal with --strict), each result's cell key, the newest result per cell
and its repeats, and whether two cells differ beyond run-to-run noise. Each file is read as
:func:`bench.records.results.load_result` reads one."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError
from bench.measure.checkpoint import STATE as CHECKPOINT_STATE
from bench.measure.stats import summarize
from bench.models import MODELS, describe_inputs
from bench.modes import mode_label
from bench.records.describe import device_of, exchange_of, source_of, tuning_of
from bench.records.results import CONFIGS_DIR, MANIFEST, upgraded
from bench.records.schema import Result
from bench.records.store import Kind, kind_of


@dataclass(frozen=True)
class Key:
    """A cell: what must be equal for two runs to be the same experiment (n apart). Runs that differ in the
    device (CPU or the GPU model), the gradient exchange's precision (--fp16-allreduce), the memory format
    (--channels-last) or the class count are different cells, never one cell's repeats."""
    label: str  # mode, or mode:strategy for modes with strategies
    mode: str
    model: str
    precision: str
    batch_size: int
    inputs: str  # the workload's input shape in words: 224x224, seq 128
    classes: int | None = None
    device: str = "cpu"  # cpu, or cuda and the GPU model: "cuda NVIDIA H100 80GB HBM3"
    fp16_allreduce: bool = False
    channels_last: bool = False
    source: str = "synthetic"  # or the dataset's format and loader: "imagefolder via torch" (bench.data.feed)
    tuning: str = ""  # what the model runs with beyond the paper's eager loop: "compiled (default), fused optimizer"
    exchange: str = ""  # the exchange's settings beyond the defaults: "fusion 32 MiB, 2 NCCL streams"

    @property
    def setting(self) -> tuple:
        return (self.model, self.precision, self.batch_size, self.inputs, self.classes, self.device,
                self.fp16_allreduce, self.channels_last, self.source, self.tuning, self.exchange)

    def extras(self) -> list[str]:
        """What sets the cell apart beyond model, inputs, batch, precision and device, in words."""
        spec = MODELS.get(self.model)
        extra = [f"{self.classes} classes"] if spec and self.classes not in (None, spec.default_classes) else []
        extra += ["fp16 allreduce"] * self.fp16_allreduce + ["channels-last"] * self.channels_last
        extra += [] if self.source == "synthetic" else [f"data: {self.source}"]
        return extra + [part for part in (self.tuning, self.exchange) if part]

    def setting_text(self) -> str:
        return (f"{self.model} {self.inputs}, batch {self.batch_size}/device, {self.precision}, {self.device}"
                + "".join(f", {e}" for e in self.extras()))


def label_of(result: Result) -> str:
    return mode_label(result.mode, result.config.strategy)


def key_of(result: Result) -> Key:
    c = result.config
    return Key(label_of(result), result.mode, c.model, c.precision, c.batch_size, describe_inputs(c),
               c.num_classes, device_of(result), bool(c.fp16_allreduce), bool(c.channels_last),
               source_of(result), tuning_of(c), exchange_of(result))


# Every run option (bench.config.RunConfig's fields), by what a cell does with it: KEYED, the key holds it (in the
# field of Key named, or through the words of describe's functions); UNKEYED, why two runs that differ in it are
# still one cell's repeats. tests/unit/test_reports.py walks RunConfig's fields against both, so a new option is
# placed here or fails the test.
KEYED = {"mode": "mode", "strategy": "label", "model": "model", "precision": "precision", "batch_size": "batch_size",
         "image_size": "inputs", "seq_len": "inputs", "num_classes": "classes", "device": "device",
         "fp16_allreduce": "fp16_allreduce", "channels_last": "channels_last", "compile": "tuning",
         "fused_optimizer": "tuning", "xla": "tuning", "tuned": "tuning", "data": "source", "loader": "source",
         "loader_workers": "source", "epochs": "source", "target_accuracy": "source",
         "fusion_threshold": "exchange", "cycle_time": "exchange", "nccl_streams": "exchange",
         "sparse_embeddings": "exchange", "sparse_as_dense": "exchange", "num_ps": "exchange"}
UNKEYED = {
    "np": "the world size: a cell's runs at each n are its columns (scaling against n = 1)",
    "warmup_steps": "outside the headline", "steps_per_window": "how the same steps are sampled",
    "windows": "how many samples of the same rate", "duration": "how long the same rate is sampled",
    "attribution_steps": "after the windows", "trace": "after the windows", "seed": "repeats differ by their seed",
    "output": "where the result goes", "mlflow": "where the result is logged too", "mlflow_experiment": "as mlflow",
    "rendezvous_timeout": "a bound, not a setting",
    "telemetry": "sampled beside the steps", "telemetry_interval": "sampled beside the steps",
    "stall_timeout": "a bound, not a setting", "checkpoint_every": "between epochs, outside the windows' clocks",
    "checkpoint_dir": "where checkpoints go", "resume_from": "a resumed run continues its own cell",
    "eval_every": "evaluations run between the windows", "stop_at_target": "the curve records where it stopped",
    "base_lr": "the recipe of a run to a target, which the curve reports", "lr_scaling": "as base_lr",
    "warmup_epochs": "as base_lr", "lr_decay": "as base_lr", "optimizer": "as base_lr",
    "weight_decay": "as base_lr", "label_smoothing": "as base_lr",
    "profile": "resolved from tuned and the device, which the key holds",
    "learning_rate": "resolved by the recipe", "momentum": "resolved by the recipe",
    "extra": "the plugins' options: each plugin's own"}


# bench report's and bench compare's --strict: how load_results treats a file that is not a result.
STRICT_HELP = ("Refuse any JSON file in the folders that is not a readable result (by default each is skipped "
               "with one warning line and listed in the report).")


def load_results(paths: list[Path], skipped: list[tuple[Path, str]] | None = None) -> list[Result]:
    """Every result under the given files or folders.

    A file that is not one (unreadable, truncated or foreign JSON, another schema version, not valid against
    the schema) is one clear error; or, when ``skipped`` is a list, it is appended there as (path, reason),
    warned about in one line on standard error, and the others are read on (bench report and compare
    without --strict: one bad file in a shared folder must not stop a report)."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += [f for f in sorted(p.rglob("*.json"))  # not a sweep's manifest and cell configs, nor a
                      if f.name not in (MANIFEST, CHECKPOINT_STATE) and f.parent.name != CONFIGS_DIR]  # checkpoint
        elif p.is_file():
            files.append(p)
        else:
            raise BenchError(f"{p} does not exist")
    if not files:
        raise BenchError(f"no hvdbench results (*.json) in {', '.join(map(str, paths))}")
    results = []
    for f in files:
        try:
            data = _read_result(f)
        except BenchError as exc:
            if skipped is None:
                raise
            skipped.append((f, str(exc)))
            print(f"warning: skipped {exc}", file=sys.stderr)
            continue
        if data is not None:
            results.append(data)
    if not results:
        raise BenchError(f"no hvdbench training results in {', '.join(map(str, paths))}")
    versions = sorted({r.schema_version for r in results})
    if len(versions) > 1:
        raise BenchError(f"results of different schema versions ({', '.join(map(str, versions))}) cannot be "
                         "reported together")
    ok = [r for r in results if r.status == "ok"]
    if not ok:
        raise BenchError("no result with status 'ok'")
    return ok


def _read_result(f: Path) -> Result | None:
    """One training result (None for a verify or allreduce record sharing the folder), or a BenchError that
    names the file."""
    try:
        data = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BenchError(f"{f} is not readable JSON ({exc})") from None
    if kind_of(data) not in (None, Kind.RESULT):
        return None  # the records of bench verify, allreduce, peak, diagnose sharing the folder: not training runs
    if not isinstance(data, dict) or "schema_version" not in data or "run_id" not in data:
        raise BenchError(f"{f} is not an hvdbench result")
    return upgraded(data, str(f))


def table_cells(results: list[Result]) -> tuple[dict[Key, dict[int, Result]], dict[tuple[Key, int], list[Result]]]:
    """{key: {n: result}} using the newest result per cell, and {(key, n): [older results on the same hosts]}.

    A run of the same cell on other hosts is not a repeat (another machine is another experiment): it is left
    out of both, with one warning line naming it."""
    cells: dict[Key, dict[int, list[Result]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        cells[key_of(r)][r.world_size].append(r)
    chosen: dict[Key, dict[int, Result]] = {}
    repeats: dict[tuple[Key, int], list[Result]] = {}
    for key, by_n in cells.items():
        chosen[key] = {}
        for n, rs in by_n.items():
            rs.sort(key=lambda r: r.created_utc)
            newest = chosen[key][n] = rs[-1]
            hosts = newest.hosts
            repeats[(key, n)] = [r for r in rs[:-1] if r.hosts == hosts]
            others = sorted({" ".join(r.hosts) for r in rs[:-1] if r.hosts != hosts})
            if others:
                print(f"warning: {key.label} {key.setting_text()} n={n} also ran on other hosts ({'; '.join(others)}) "
                      f"than its newest run ({' '.join(hosts)}): not counted as repeats; compare them with bench "
                      "compare from separate folders", file=sys.stderr)
    return chosen, repeats


@dataclass(frozen=True)
class Between:
    """A cell's headline throughput across its repeated runs (one launch each)."""
    runs: int
    mean: float
    ci95: list[float]  # the 95% Student-t interval of the mean over the runs


def between_runs(runs: list[Result]) -> Between | None:
    """The run-to-run view of a cell's headline throughput from its repeated runs (one launch each): mean, and
    the 95% Student-t interval of that mean over the runs; None for fewer than two runs. Only this interval holds
    what changes from launch to launch (NCCL's algorithm choice, cuDNN autotuning, clocks, heat); a run's own
    ``ci95`` is within that launch."""
    values = [r.summary.samples_per_sec_total for r in runs]
    if len(values) < 2:
        return None
    s = summarize(values)
    return Between(runs=len(values), mean=s["mean"], ci95=s["ci95"])  # two values or more: both defined


def significant(a_runs: list[Result], b_runs: list[Result]) -> bool | None:
    """Whether two cells' headline throughputs differ beyond run-to-run noise: their between-run 95% intervals do
    not overlap. None (not decided) unless each side has at least two runs: within-run intervals of one launch
    each leave out run-to-run variance and would overclaim."""
    a, b = between_runs(a_runs), between_runs(b_runs)
    if a is None or b is None:
        return None
    (a_low, a_high), (b_low, b_high) = a.ci95, b.ci95
    return a_high < b_low or b_high < a_low
