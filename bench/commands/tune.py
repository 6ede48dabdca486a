"""bench tune: the batch size past which throughput stops growing (the knee), for one mode, model and precision.

From ``--start`` (default: the device's paper batch, 64 on a GPU, 8 on the CPU) the batch doubles while each
doubling gains at least ``--min-gain`` (default 2%) in total samples/s, up to ``--max-batch``; a batch that runs
out of memory ends the search. With batches b_0 < b_1 < ... and their rates r_i::

    gain_i = r_i / r_(i-1) - 1
    knee   = b_(k-1), for the first k with gain_k < min_gain, or b_k out of memory; else the last batch run

so the knee is the smallest batch whose doubling no longer pays (or the largest that fits). Every batch is an
ordinary run, a cell of a sweep in the folder (results, manifest.json, logs: resumable, and each cell reruns when
the common options change); the tune record (``kind: tune``), tune.md and the table keep every batch's rate and
gain. The run options a sweep passes to every cell (--tuned, --compile, --channels-last, --image-size, --device,
...) go to every run here too: ``bench tune torch-single --model resnet50 --precision amp-bf16 --tuned`` finds the
batch for the tuned profile on this GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import files
from bench.commands.sweep import Cell, Manifest, SweepMatrix, run_sweep
from bench.config import CPU_PROFILE, GPU_PROFILE, check_declared, cli_options, option, option_specs
from bench.errors import OOM_ERRORS, BenchError
from bench.modes import variant
from bench.records import store
from bench.records.header import header, new_run_id
from bench.records.kinds import Tune, TunePoint
from bench.records.results import load_result

MIN_GAIN = 0.02


@dataclass(frozen=True)
class TuneConfig:
    """bench tune's own options, declared once (the run options every run gets come from RunConfig's declarations,
    as bench sweep passes them)."""
    mode: str = option("", "The mode (mode:strategy picks a strategy).", argument=True)
    np: int = option(1, "Ranks (devices) of every run.", flag="--np", aliases=("-np",), minimum=1)
    model: str = option("resnet50", "The model.")
    precision: str = option("fp32", "The precision of every run.")
    start: int | None = option(None, "The first batch per device (default: the device's paper batch: 64 on a GPU, "
                               "8 on the CPU).", minimum=1)
    max_batch: int = option(4096, "The largest batch per device to try.", minimum=1)
    min_gain: float = option(MIN_GAIN, "Stop when doubling the batch gains less than this share of samples/s.",
                             positive=True)
    output: str = option("results/tune", "The folder: every run's result, the manifest and logs, the tune record "
                         "and tune.md.")
    cell_timeout: float | None = option(None, "Stop a run that takes longer than this many seconds.",
                                        positive=True, unit="seconds")
    common: dict[str, Any] = field(default_factory=dict)  # the run options every run gets (bench.cli)

    def __post_init__(self) -> None:
        check_declared(self)
        v = variant(self.mode)
        if not v.mode.distributed and self.np != 1:
            raise BenchError(f"{self.mode} runs on one device: drop --np")
        if self.start is not None and self.start > self.max_batch:
            raise BenchError(f"--start {self.start} is above --max-batch {self.max_batch}")

    def first_batch(self) -> int:
        """--start, else the paper batch of the device the runs will take (as the runs resolve --device)."""
        if self.start is not None:
            return self.start
        device = str(self.common.get("device") or "auto")
        if device == "auto":
            from bench.distributed import torchdist

            device = "cuda" if torchdist.use_cuda("auto") else "cpu"
        return (GPU_PROFILE if device == "cuda" else CPU_PROFILE).batch_size

    def sweep(self, batches: list[int]) -> SweepMatrix:
        return SweepMatrix(modes=[self.mode], nps=[self.np], models=[self.model], precisions=[self.precision],
                           batch_sizes=list(batches), common=self.common)


def ran_out_of_memory(log: Path) -> bool:
    """Whether a run's log ends on a framework's out-of-memory error (bench.errors.one_line's words for it)."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    return any(f"error: {what} (" in text for what in OOM_ERRORS.values())


def knee(points: list[TunePoint], min_gain: float) -> tuple[int | None, str]:
    """The knee of the measured points (batch, rate, gain, status) and why the search stopped there (module
    docstring)."""
    ok = [p for p in points if p.status == "ok"]
    last = points[-1] if points else None
    if not ok:
        return None, "no batch ran" if last is None else f"batch {last.batch}: {last.status}"
    if last.status == "out of memory":
        return ok[-1].batch, f"batch {last.batch} ran out of memory"
    if last.status != "ok":
        return ok[-1].batch, f"batch {last.batch} {last.status}: {last.error}"
    if last.gain is not None and last.gain < min_gain:
        return ok[-2].batch, f"doubling to {last.batch} gained {last.gain:+.1%} (< {min_gain:.0%})"
    return last.batch, "reached --max-batch"


def search(cfg: TuneConfig, folder: Path) -> list[TunePoint]:
    """Run the doubling batches until the knee (module docstring); every batch's point."""
    batches: list[int] = []
    points: list[TunePoint] = []
    batch = cfg.first_batch()
    while batch <= cfg.max_batch:
        batches.append(batch)
        sweep = cfg.sweep(batches)
        run_sweep(sweep, folder, progress=False, cell_timeout=cfg.cell_timeout)
        cell = Cell(variant(cfg.mode).mode.name, variant(cfg.mode).strategy if ":" in cfg.mode else None, cfg.np,
                    cfg.model, cfg.precision, batch)
        entry = Manifest(folder, None).cell(cell)
        point = TunePoint(batch=batch, rate=None, gain=None, status=entry.status, error=entry.error,
                          result=entry.result)
        if point.status == "ok":
            point.rate = load_result(folder / str(entry.result)).summary.samples_per_sec_total
            before = [p for p in points if p.status == "ok"]
            point.gain = point.rate / before[-1].rate - 1 if before else None
        elif ran_out_of_memory(folder / str(entry.log)):
            point.status = "out of memory"
        points.append(point)
        if point.status != "ok" or (point.gain is not None and point.gain < cfg.min_gain):
            break
        batch *= 2
    return points


def flags(common: dict[str, Any]) -> list[str]:
    """The run options every run got, as the command line writes them ('--tuned', '--image-size 224'); those at
    their defaults left out."""
    declared = cli_options()
    defaults = {name: default for name, _, default, _ in option_specs()}
    out = []
    for name, value in sorted(common.items()):
        if name in defaults and value == defaults[name]:
            continue
        how = declared.get(name)
        flag = (how.flag if how is not None and how.flag else f"--{name.replace('_', '-')}")
        if isinstance(value, bool):
            on, _, off = flag.partition("/")
            out.append(on if value else off or f"--no-{name.replace('_', '-')}")
        elif name != "extra":
            out += [flag, str(value)]
    return out


def markdown(record: Tune) -> list[str]:
    lines = [f"{record.mode} np {record.np}, {record.model}, {record.precision}"
             f"{', ' + record.options if record.options else ''}: the knee is "
             + (f"batch {record.knee} per device" if record.knee else "not found") + f" ({record.why}).",
             "", "| batch per device | samples/s total | gain over the previous batch | status |", "|---|---|---|---|"]
    for p in record.points:
        rate = "-" if p.rate is None else f"{p.rate:.1f}"
        gain = "-" if p.gain is None else f"{p.gain:+.1%}"
        lines.append(f"| {p.batch} | {rate} | {gain} | {p.status} |")
    return lines


def main(cfg: TuneConfig) -> int:
    folder = Path(cfg.output)
    points = search(cfg, folder)
    chosen, why = knee(points, cfg.min_gain)
    options = " ".join(flags(cfg.common))
    record = Tune(**header(new_run_id("tune"), store.Kind.TUNE), mode=cfg.mode, np=cfg.np, model=cfg.model,
                  precision=cfg.precision, options=options, common=cfg.common, min_gain=cfg.min_gain,
                  max_batch=cfg.max_batch, points=points, knee=chosen, why=why)
    path = store.write(folder / f"{record.run_id}.json", record)
    files.replace(folder / "tune.md", "\n".join(["# bench tune", "", *markdown(record), ""]))
    print("\n".join(markdown(record)))  # plain lines: never wrapped, whatever the terminal's width
    print(f"tune: record {path}; {folder / 'tune.md'}")
    if chosen is None:
        raise BenchError(f"no batch ran: {why}; the logs are in {folder}/logs")
    return 0
