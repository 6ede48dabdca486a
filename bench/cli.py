"""The ``bench`` command line: thin typer commands over bench.run, bench.env and the registries."""

from __future__ import annotations

import inspect
import json
import os
import sys
from enum import Enum
from typing import Annotated

import typer
from typer.exceptions import TyperException

from bench import __version__
from bench.config import Device, Precision, RunConfig, Strategy
from bench.errors import BenchError
from bench.models import MODELS
from bench.modes import MODES

app = typer.Typer(help="Distributed training throughput: Horovod against the frameworks' own stacks.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

ModelName = Enum("ModelName", {name: name for name in MODELS}, type=str)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hvdbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    pass


def _opt(help_text: str, *names: str, **kwargs) -> typer.models.OptionInfo:
    return typer.Option(*names, help=help_text, **kwargs)


# One table of options for every mode: (name, type, default, typer.Option). tf-native adds two.
COMMON_OPTIONS = [
    ("model", ModelName, ModelName.vgg16, _opt("Model to train.")),
    ("batch_size", int | None, None, _opt("Images per device per step (default: 64 on GPU, 8 on CPU).")),
    ("image_size", int | None, None,
     _opt("Square image side (default: the model's own (224; 299 for inception3) on GPU, 64 on CPU).")),
    ("num_classes", int, 1000, _opt("Classifier outputs (10 = CIFAR-10 shape).")),
    ("precision", Precision, Precision.fp32, _opt("fp32 (TF32 on GPU) or autocast mixed precision.")),
    ("channels_last", bool, False, _opt("NHWC memory format (PyTorch; TensorFlow is always NHWC).",
                                         "--channels-last")),
    ("warmup_steps", int | None, None,
     _opt("Timed steps after the first, kept out of the headline (default: 10 GPU, 2 CPU).")),
    ("steps_per_window", int | None, None, _opt("Steps between two device syncs (default: 10 GPU, 4 CPU).")),
    ("windows", int | None, None, _opt("Timed windows (default: 10 GPU, 5 CPU).")),
    ("duration", float | None, None, _opt("Run windows for this many seconds instead of --windows.")),
    ("np", int | None, None, _opt("Ranks to spawn when no launcher is around (default: every GPU, else 2).",
                                     "--np")),
    ("device", Device, Device.auto, _opt("Where to train.")),
    ("seed", int, 42, _opt("Seed for weights and synthetic data.")),
    ("output", str, "results", _opt("Directory for result JSON files and results.csv.")),
    ("fp16_allreduce", bool, False, _opt("Compress gradients to fp16 for the allreduce.", "--fp16-allreduce")),
    ("rendezvous_timeout", float, 120.0, _opt("Seconds to wait for all ranks to meet.")),
    ("telemetry", bool, True, _opt("Sample GPU telemetry through NVML on each node.", "--telemetry/--no-telemetry")),
    ("telemetry_interval", float, 0.5, _opt("Seconds between telemetry samples.")),
]
MODE_OPTIONS = {
    "tf-native": [
        ("strategy", Strategy, Strategy.multiworker, _opt("tf.distribute strategy.")),
        ("num_ps", int | None, None, _opt("Parameter servers for --strategy ps (default: 1).", "--num-ps")),
    ],
}


def _mode_command(mode: str):
    """A typer command for ``mode`` whose signature is built from the option table."""
    options = COMMON_OPTIONS + MODE_OPTIONS.get(mode, [])

    def command(**kwargs) -> None:
        from bench.run import run

        kwargs["model"] = kwargs["model"].value
        run(RunConfig(mode=mode, **kwargs))

    params = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                annotation=Annotated[kind, option])
              for name, kind, default, option in options]
    command.__signature__ = inspect.Signature(params)
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = MODES[mode].description
    return command


for _name in MODES:
    app.command(_name)(_mode_command(_name))


@app.command("sweep")
def sweep_command(
    modes: Annotated[str, typer.Option(help="Comma-separated modes; tf-native:ps picks a strategy.")],
    np: Annotated[str, typer.Option("--np", help="Comma-separated rank counts.")] = "1,2",
    models: Annotated[str, typer.Option(help="Comma-separated models.")] = "vgg16",
    precisions: Annotated[str, typer.Option(help="Comma-separated precisions.")] = "fp32",
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated per-device batch sizes (empty: each "
                                             "device's default).")] = "",
    image_size: Annotated[int | None, typer.Option(help="Passed to every run.")] = None,
    warmup_steps: Annotated[int | None, typer.Option(help="Passed to every run.")] = None,
    steps_per_window: Annotated[int | None, typer.Option(help="Passed to every run.")] = None,
    windows: Annotated[int | None, typer.Option(help="Passed to every run.")] = None,
    device: Annotated[Device, typer.Option(help="Passed to every run.")] = Device.auto,
    num_classes: Annotated[int | None, typer.Option(help="Passed to every run.")] = None,
    output: Annotated[str, typer.Option(help="The sweep folder (results, manifest.json, logs).")] = "results/sweep",
    redo: Annotated[bool, typer.Option("--redo", help="Run finished cells again instead of skipping them.")] = False,
) -> None:
    """Run a matrix of benchmarks, one run per cell, resumable (here, or one srun step per cell in Slurm)."""
    from pathlib import Path

    from bench.sweep import SweepConfig, parse_list, run_sweep

    common = []
    for flag, value in (("--image-size", image_size), ("--warmup-steps", warmup_steps),
                        ("--steps-per-window", steps_per_window), ("--windows", windows),
                        ("--num-classes", num_classes)):
        if value is not None:
            common += [flag, str(value)]
    common += ["--device", device.value]
    sweep = SweepConfig(modes=parse_list(modes), nps=parse_list(np, int), models=parse_list(models),
                        precisions=parse_list(precisions), batch_sizes=parse_list(batch_sizes, int) or [None],
                        common=common)
    summary = run_sweep(sweep, Path(output), redo=redo)
    if summary.get("failed"):
        raise BenchError(f"{summary['failed']} cell(s) failed; their logs are in {output}/logs")


@app.command("report")
def report_command(
    paths: Annotated[list[str], typer.Argument(help="Sweep folders or result files.")],
    out: Annotated[str | None, typer.Option(help="Where report.md, report.csv and the plots go "
                                            "(default: the first folder).")] = None,
) -> None:
    """Write report.md, report.csv and plots from results (never re-runs anything)."""
    from pathlib import Path

    from bench.report import write_report

    first = Path(paths[0])
    target = Path(out) if out else (first if first.is_dir() else first.parent)
    typer.echo(f"report: {write_report([Path(p) for p in paths], target)}")


@app.command("compare")
def compare_command(
    a: Annotated[str, typer.Argument(help="Baseline: a result file or a sweep folder.")],
    b: Annotated[str, typer.Argument(help="Candidate: a result file or a sweep folder.")],
    metric: Annotated[str, typer.Option(help="Metric that --max-regression checks.")] = "images_per_sec_total",
    max_regression: Annotated[float | None, typer.Option(help="Exit 1 when METRIC regressed by more than this "
                                                         "many percent in any cell.")] = None,
) -> None:
    """Compare two results or sweeps metric by metric: relative change and significance (CI overlap)."""
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from bench.compare import METRICS, compare, regressions

    if metric not in METRICS:
        raise BenchError(f"unknown metric '{metric}' (choose from: {', '.join(METRICS)})")
    rows = compare(Path(a), Path(b))
    table = Table("cell", "metric", "A", "B", "change", "significant", title=f"{a} -> {b}")
    for r in rows:
        sig = {True: "yes", False: "no", None: "n/a"}[r["significant"]]
        table.add_row(r["cell"], r["metric"], f"{r['a']:.4g}", f"{r['b']:.4g}", f"{r['change']:+.1%}", sig)
    Console().print(table)
    if max_regression is not None:
        bad = regressions(rows, metric, max_regression)
        if bad:
            worst = max(bad, key=lambda r: r["regression"])
            raise BenchError(f"{metric} regressed by {worst['regression']:.1%} in {worst['cell']} "
                             f"(more than {max_regression:g}% allowed)")


@app.command("models")
def models_command() -> None:
    """List the models with their parameter counts (at 1000 classes)."""
    from rich.console import Console
    from rich.table import Table

    table = Table("model", "parameters", "default image", "min image", "description")
    for spec in MODELS.values():
        table.add_row(spec.name, f"{spec.params_1000:,}", str(spec.default_image_size), str(spec.min_image_size),
                      spec.description)
    Console().print(table)


@app.command("env")
def env_command(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Print the environment every result records (versions, GPUs, MPI, container)."""
    from bench import env

    record = env.full()
    if as_json:
        typer.echo(json.dumps(record, indent=2))
        return
    from rich.console import Console
    from rich.pretty import Pretty

    Console().print(Pretty(record))


def _rank_prefix() -> str:
    try:
        from bench.launch import detect

        info = detect()
    except BenchError:
        return ""
    return f"rank {info.rank}: " if info.launcher != "none" else ""


def summary_line(exc: BaseException) -> str:
    """The informative line of an exception message: TensorFlow's start 'in user code:' and end with the error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[-1][:300] if lines[0].endswith(":") and len(lines) > 1 else lines[0][:300]


def main() -> None:
    try:
        rc = app(standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(130)
    except TyperException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.exit(0)
        print(f"error: {exc.format_message()} (see 'bench --help')", file=sys.stderr)
        sys.exit(2)
    except BenchError as exc:
        print(f"{_rank_prefix()}error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # an unexpected failure on a rank: one line unless debugging
        if os.environ.get("HVDBENCH_DEBUG"):
            raise
        print(f"{_rank_prefix()}internal error: {type(exc).__name__}: {summary_line(exc)}"
              " (HVDBENCH_DEBUG=1 shows the traceback)", file=sys.stderr)
        sys.exit(1)
    sys.exit(rc if isinstance(rc, int) else 0)
