"""The ``bench`` command line: thin typer commands over bench.run, bench.env and the registries."""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from typing import Annotated

import typer
from typer.exceptions import TyperException

from bench import __version__
from bench.config import Device, Precision, RunConfig
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


def _mode_command(mode: str):
    def command(
        model: Annotated[ModelName, typer.Option(help="Model to train.")] = ModelName.vgg16,
        batch_size: Annotated[int | None, typer.Option(help="Images per device per step "
                                                          "[default: 64 on GPU, 8 on CPU].")] = None,
        image_size: Annotated[int | None, typer.Option(help="Square image side [default: model's own "
                                                          "(224; 299 for inception3) on GPU, 64 on CPU].")] = None,
        num_classes: Annotated[int, typer.Option(help="Classifier outputs (10 = CIFAR-10 shape).")] = 1000,
        precision: Annotated[Precision, typer.Option(help="fp32 (TF32 on GPU) or autocast mixed precision.")]
        = Precision.fp32,
        channels_last: Annotated[bool, typer.Option("--channels-last", help="NHWC memory format.")] = False,
        warmup_steps: Annotated[int | None, typer.Option(help="Timed steps after the first, kept out "
                                                            "of the headline [default: 10 GPU, 2 CPU].")] = None,
        steps_per_window: Annotated[int | None, typer.Option(help="Steps between two device syncs "
                                                                "[default: 10 GPU, 4 CPU].")] = None,
        windows: Annotated[int | None, typer.Option(help="Timed windows [default: 10 GPU, 5 CPU].")] = None,
        duration: Annotated[float | None, typer.Option(help="Run windows for this many seconds "
                                                          "instead of --windows.")] = None,
        np: Annotated[int | None, typer.Option("--np", help="Ranks to spawn when no launcher is around "
                                                  "[default: every GPU, else 2].")] = None,
        device: Annotated[Device, typer.Option(help="Where to train.")] = Device.auto,
        seed: Annotated[int, typer.Option(help="Seed for weights and synthetic data.")] = 42,
        output: Annotated[str, typer.Option(help="Directory for result JSON files and results.csv.")]
        = "results",
        fp16_allreduce: Annotated[bool, typer.Option("--fp16-allreduce",
                                                     help="Compress gradients to fp16 for the allreduce.")] = False,
        rendezvous_timeout: Annotated[float, typer.Option(help="Seconds to wait for all ranks to meet.")]
        = 120.0,
    ) -> None:
        from bench.run import run

        cfg = RunConfig(mode=mode, model=model.value, batch_size=batch_size, image_size=image_size,
                        num_classes=num_classes, precision=precision, channels_last=channels_last,
                        warmup_steps=warmup_steps, steps_per_window=steps_per_window, windows=windows,
                        duration=duration, np=np, device=device, seed=seed, output=output,
                        fp16_allreduce=fp16_allreduce, rendezvous_timeout=rendezvous_timeout)
        run(cfg)

    command.__doc__ = MODES[mode].description
    return command


for _name in MODES:
    app.command(_name)(_mode_command(_name))


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
        print(f"{_rank_prefix()}internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
              " (HVDBENCH_DEBUG=1 shows the traceback)", file=sys.stderr)
        sys.exit(1)
    sys.exit(rc if isinstance(rc, int) else 0)
