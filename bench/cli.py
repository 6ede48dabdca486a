"""The ``bench`` command line: thin typer commands over bench.run, bench.records.env and the registries."""

from __future__ import annotations

import inspect
import json
import os
import signal
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.exceptions import TyperException

import bench.run
from bench import __version__, plugins
from bench.commands import allreduce, compare, converge, data, peak, predict, report, verify
from bench.commands import kubernetes as k8s
from bench.commands.converge import ConvergeConfig
from bench.commands.diagnose import DiagnoseConfig
from bench.commands.diagnose import main as diagnose_main
from bench.commands.sweep import SweepConfig, load_sweep, parse_list, run_sweep
from bench.commands.verify import VerifyConfig
from bench.config import PLUGIN_OPTIONS, RunConfig, declared, option_specs
from bench.data import make
from bench.data.loaders import loader as loader_named
from bench.data.make import MakeConfig
from bench.deps import missing_message
from bench.errors import BenchError, Stopped
from bench.launching import envs, supervise
from bench.launching.detect import detect
from bench.launching.slurm import slurm_time_limit
from bench.models import MODELS
from bench.modes import MODES
from bench.records import env
from bench.records.schema import json_schema
from bench.tables import never_cut

try:  # before the commands are made: plugins add modes (one command each) and models
    plugins.load()
except BenchError as _exc:
    print(f"error: {_exc}", file=sys.stderr)
    sys.exit(1)

app = typer.Typer(help="Distributed training throughput: Horovod against the frameworks' own stacks.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hvdbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    pass


def option_parameters(only_sweep: bool = False) -> list[inspect.Parameter]:
    """The typer parameters of the run options as RunConfig (and the plugins) declare them; ``only_sweep``:
    those `bench sweep` passes to every cell."""
    params = []
    for name, type_, default, how in option_specs():
        if only_sweep and not how.sweep:
            continue
        decls = [how.flag] if how.flag else []
        text = f"Passed to every run: {how.help}" if only_sweep else how.help
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=Annotated[type_, typer.Option(*decls, help=text)]))
    return params


def command_parameters(cls: type) -> list[inspect.Parameter]:
    """The typer parameters of every option a command's configuration dataclass declares (bench.config.option):
    its help, its flag, and for an option the command line writes as text (a list, a size) the text's default."""
    params = []
    for name, type_, default, how in declared(cls):
        if how.parse is not None:
            type_ = str | None if default is None else str
            default = default if how.shown is None else how.shown
        decls = [how.flag] if how.flag else []
        kind = typer.Argument(help=how.help) if how.argument else typer.Option(*decls, help=how.help)
        if how.argument and default in ("", None):
            default = inspect.Parameter.empty  # a required argument
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=Annotated[type_, kind]))
    return params


def declared_command(name: str, cls: type, main: Callable[[Any], int | None], help: str,
                     on: typer.Typer | None = None) -> None:
    """Register ``bench NAME``: its flags are ``cls``'s declared options, its body builds the configuration
    (validated on construction) and hands it to ``main``, which renders its own output; an int it returns is the
    exit status."""
    parsers = {field: how.parse for field, _, _, how in declared(cls) if how.parse is not None}

    def command(**options: Any) -> None:
        values = {k: parsers[k](v) if k in parsers and isinstance(v, str) else v for k, v in options.items()}
        code = main(cls(**values))
        if code:
            raise typer.Exit(code)

    command.__signature__ = inspect.Signature(command_parameters(cls))
    (on or app).command(name, help=help)(command)


def config_arguments(values: dict) -> dict:
    """RunConfig's keyword arguments from option values by name: its fields as they are, the plugins' in extra."""
    extra = {name: values.pop(name) for name in list(values) if name in PLUGIN_OPTIONS}
    return {**values, "extra": extra} if extra else values


def train(ctx: typer.Context, **options) -> None:
    """Train with the mode this command is named after (bench MODE --help)."""
    envs.enter(MODES[ctx.info_name].framework)

    bench.run.run(RunConfig(mode=ctx.info_name, **config_arguments(options)))


# typer reads the flags from the signature: every run option as RunConfig and the plugins declare it.
train.__signature__ = inspect.Signature([
    inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
    *option_parameters()])

for _spec in MODES.values():  # one command per mode, all the same function; ctx.info_name is the mode
    app.command(_spec.name, help=_spec.description)(train)


@app.command("run")
def run_command(config: Annotated[str, typer.Argument(help="A run configuration as JSON: a file, - for standard "
                                                      "input, or the JSON text itself (bench sweep gives each "
                                                      "cell a file).")]) -> None:
    """Run the benchmark a JSON run configuration describes (RunConfig's fields; bench sweep writes one per cell)."""
    try:
        if config.lstrip().startswith("{"):
            text = config
        else:
            text = sys.stdin.read() if config == "-" else Path(config).read_text()
    except OSError as exc:
        raise BenchError(f"cannot read {config}: {exc.strerror or exc}") from None
    cfg = RunConfig.from_json(text)
    envs.enter(MODES[cfg.mode].framework, ["run", text])
    bench.run.run(cfg)


@app.command("schema")
def schema_command(diagnose: Annotated[bool, typer.Option("--diagnose", help="The schema of bench diagnose's "
                                                         "record instead.")] = False) -> None:
    """Print the JSON Schema of the result file every run writes (or of bench diagnose's record)."""
    typer.echo(json.dumps(json_schema("diagnose" if diagnose else "result"), indent=2))


def sweep_command(
    modes: Annotated[str | None, typer.Option(help="Comma-separated modes; mode:strategy picks a strategy, e.g. "
                                              "tf-native:ps (required unless --resume).")] = None,
    np: Annotated[str, typer.Option("--np", help="Comma-separated rank counts.")] = "1,2",
    models: Annotated[str, typer.Option(help="Comma-separated models.")] = "vgg16",
    precisions: Annotated[str, typer.Option(help="Comma-separated precisions.")] = "fp32",
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated per-device batch sizes (empty: each "
                                             "device's default).")] = "",
    seeds: Annotated[str, typer.Option(help="Comma-separated seeds: every cell once per seed, the repeats of one "
                                       "configuration (empty: once, at the run's default seed).")] = "",
    output: Annotated[str, typer.Option(help="The sweep folder (results, manifest.json, logs).")] = "results/sweep",
    redo: Annotated[bool, typer.Option("--redo", help="Run finished cells again instead of skipping them.")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Run the matrix the folder's manifest records again: "
                                         "cells not ok (failed, timed out, interrupted) rerun.")] = False,
    cell_timeout: Annotated[float | None, typer.Option(help="Stop a cell that runs longer than this many seconds, "
                                                       "mark it timed_out and go on.")] = None,
    **passed,
) -> None:
    """Run a matrix of benchmarks, one run per cell, resumable (here, or one srun step per cell in Slurm)."""
    if resume:
        summary = run_sweep(load_sweep(Path(output)), Path(output), redo=redo, cell_timeout=cell_timeout)
        _sweep_exit(summary, output)
        return
    if not modes:
        raise BenchError("--modes is required (or --resume to rerun a sweep folder's own matrix)")
    common = passed_to_cells(passed)
    sweep = SweepConfig(modes=parse_list(modes), nps=parse_list(np, int), models=parse_list(models),
                        precisions=parse_list(precisions), batch_sizes=parse_list(batch_sizes, int) or [None],
                        common=common, seeds=parse_list(seeds, int) or [None])
    _sweep_exit(run_sweep(sweep, Path(output), redo=redo, cell_timeout=cell_timeout), output)


# The sweep's own options, then every run option declared for sweeps (Option.sweep), built from the declarations.
sweep_command.__signature__ = inspect.Signature([
    *(p for p in inspect.signature(sweep_command, eval_str=True).parameters.values()
      if p.kind != inspect.Parameter.VAR_KEYWORD),
    *option_parameters(only_sweep=True)])
app.command("sweep")(sweep_command)


def passed_to_cells(passed: dict[str, Any]) -> dict[str, Any]:
    """The run options a sweep or bench converge passes to every cell: those set (None leaves the run's own
    default; a flag counts when it differs from its default)."""
    defaults = {name: default for name, _, default, _ in option_specs()}
    return config_arguments({name: value.value if isinstance(value, Enum) else value
                             for name, value in passed.items()
                             if value is not None and not (isinstance(value, bool) and value == defaults[name])})


def converge_command(**options: Any) -> None:
    """Train to a target in several modes and world sizes, each repeated: one table, one plot, PASS or FAIL."""
    own = {name: how for name, _, _, how in declared(ConvergeConfig)}
    values = {k: own[k].parse(v) if own[k].parse is not None and isinstance(v, str) else v
              for k, v in options.items() if k in own}
    code = converge.main(ConvergeConfig(**values, common=passed_to_cells(
        {k: v for k, v in options.items() if k not in own})))
    if code:
        raise typer.Exit(code)


# bench converge's own options, then every run option declared for sweeps (the training to a target among them).
converge_command.__signature__ = inspect.Signature([*command_parameters(ConvergeConfig),
                                                    *option_parameters(only_sweep=True)])
app.command("converge", help="Train to a target in several modes and world sizes, each repeated: the time to "
            "the target, the final accuracies, one plot and PASS or FAIL (docs/training.md).")(converge_command)


def _sweep_exit(summary: dict[str, int], output: str) -> None:
    bad = summary.get("failed", 0) + summary.get("timed_out", 0)
    if bad:
        raise BenchError(f"{bad} cell(s) failed or timed out; their logs are in {output}/logs")


declared_command("report", report.ReportConfig, report.main, "Write report.md, report.csv and plots from results "
                 "(never re-runs anything).")
declared_command("compare", compare.CompareConfig, compare.main, "Compare two results or sweeps metric by metric: "
                 "relative change, and significance from repeated runs.")
declared_command("predict", predict.PredictConfig, predict.main, "Predict images/s and scaling efficiency at N GPUs "
                 "from a 1-GPU step time and the network (see formula).")
declared_command("peak", peak.PeakConfig, peak.main, "The achievable matrix-multiply rate of this device (a GEMM "
                 "sweep): the measured peak results' MFU uses.")
declared_command("verify", VerifyConfig, verify.main, "Check that every distributed mode trains what one process "
                 "trains on the global batch (exit 1 on FAIL).")
declared_command("diagnose", DiagnoseConfig, diagnose_main, "Find the slow node, device or link: devices alone, "
                 "node pairs, the full job; rules over the figures (exit 3 when one finds an error).")
declared_command("allreduce", allreduce.AllreduceConfig, allreduce.main, "Allreduce (or allgather, all-to-all) "
                 "microbenchmark over message sizes: time, algbw and busbw (nccl-tests definitions).")
data_app = typer.Typer(help="Datasets on disk: make one, and measure what input pipelines read from it.",
                       no_args_is_help=True)
app.add_typer(data_app, name="data")
declared_command("make", MakeConfig, make.main, "Write a dataset for trials and tests (ImageNet folder, TFRecord, "
                 "CIFAR-10 or tokens; synthetic or scikit-learn's real digits), deterministic by seed.", data_app)
declared_command("bench", data.DataBenchConfig, data.main, "The input pipeline alone, no model: images/s of each "
                 "loader with 1..K workers, the decode rate per core and the cores that feed a node's GPUs.", data_app)


def k8s_command(
    mode: Annotated[str, typer.Argument(help="The mode to run: a Horovod mode (MPIJob), torch-ddp or torch-hybrid "
                                        "(TrainJob), tf-native (indexed Job).")],
    image: Annotated[str, typer.Option(help="The image every pod runs (a published hvdbench image, "
                                       "docs/images.md).")],
    nodes: Annotated[int, typer.Option(help="Nodes (pods of ranks; tf-native: one pod per device).")] = 2,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node, one rank each (0: a CPU run, one rank per "
                                               "node).")] = 0,
    name: Annotated[str | None, typer.Option(help="The job's name (default hvdbench-MODE).")] = None,
    namespace: Annotated[str, typer.Option(help="The namespace it runs in.")] = "default",
    results_claim: Annotated[str, typer.Option(help="A PersistentVolumeClaim (ReadWriteMany) mounted at /results; "
                                               "results go to /results/NAME.")] = "hvdbench-results",
    shm_size: Annotated[str | None, typer.Option(help="/dev/shm per pod (default 2Gi per GPU, 1Gi on "
                                                 "CPU).")] = None,
    env_vars: Annotated[list[str] | None, typer.Option("--env", help="NAME=VALUE in every pod (e.g. "
                                                       "NCCL_SOCKET_IFNAME=eth0); repeat it.")] = None,
    data_claim: Annotated[str | None, typer.Option(help="A PersistentVolumeClaim holding a dataset: mounted "
                                                   "read-only at /data in every pod, and the run reads it (--data "
                                                   "/data; docs/data.md).")] = None,
    **options,
) -> None:
    """Print the Kubernetes manifests that run MODE (docs/kubernetes.md): kubectl apply -f - reads them."""
    import shlex

    if mode not in MODES:
        raise BenchError(f"unknown mode '{mode}' (choose from {', '.join(MODES)})")
    pairs = []
    for item in env_vars or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise BenchError(f"--env takes NAME=VALUE (got {item!r})")
        pairs.append((key, value))
    arguments = config_arguments(options)
    if arguments.get("data") is not None:  # a path in the pods, not here: the run checks it there
        raise BenchError(f"bench k8s: the pods read the dataset from --data-claim, mounted at {k8s.DATA}; leave out "
                         "--data")
    loader = []  # checked by the run in the pods, where the dataset is: passed on as flags
    for key in ("loader", "loader_workers"):
        if arguments.get(key) is not None:
            loader += [f"--{key.replace('_', '-')}", str(arguments.pop(key))]
    if arguments.get("loader") is None and "--loader" in loader:
        name = loader[loader.index("--loader") + 1]
        if loader_named(name).framework not in (MODES[mode].framework, "any"):
            raise BenchError(f"--loader {name} feeds {loader_named(name).framework}; {mode} is "
                             f"{MODES[mode].framework}")
    cfg = k8s.K8sConfig(run=RunConfig(mode=mode, **arguments), image=image, nodes=nodes,
                        gpus_per_node=gpus_per_node, name=name, namespace=namespace, results_claim=results_claim,
                        shm_size=shm_size, env=tuple(pairs), data_claim=data_claim, loader=tuple(loader))
    typer.echo(k8s.render(cfg, shlex.join(["bench", *sys.argv[1:]])), nl=False)


k8s_command.__signature__ = inspect.Signature([
    *list(inspect.signature(k8s_command, eval_str=True).parameters.values())[:-1], *option_parameters()])
app.command("k8s")(k8s_command)


@app.command("models")
def models_command(as_json: Annotated[bool, typer.Option("--json", help="Print JSON (one object per model).")]
                   = False) -> None:
    """List the models: workload kind, parameters (at their default classes or vocabulary), input sizes."""
    rows = [{"model": spec.name, "kind": spec.workload.kind, "unit": spec.workload.unit,
             "parameters": spec.parameters(spec.default_classes), "default_classes": spec.default_classes,
             "default_image_size": spec.default_image_size, "min_image_size": spec.min_image_size,
             "default_seq_len": spec.default_seq_len, "batch_norm": spec.batch_norm,
             "sparse_embeddings": spec.sparse_embeddings, "description": spec.description}
            for spec in MODELS.values()]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table()
    table.add_column("model")  # what users type: never cut (the description wraps)
    for column in ("kind", "parameters", "default input", "min image"):
        table.add_column(column, no_wrap=True)
    table.add_column("description", overflow="fold")
    for r in rows:
        inputs = (f"seq {r['default_seq_len']}, vocab {r['default_classes']:,}" if r["default_seq_len"]
                  else f"{r['default_image_size']}x{r['default_image_size']}")
        table.add_row(r["model"], r["kind"], f"{r['parameters']:,}", inputs, str(r["min_image_size"] or "–"),
                      r["description"])
    Console().print(never_cut(table, "model"))


@app.command("env")
def env_command(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
                check: Annotated[bool, typer.Option("--check", help="Also fail (exit 1) when a framework's process "
                                                    "loads two NCCLs or CUDA runtimes, or one from outside its "
                                                    "environment.")] = False) -> None:
    """Print the environment every result records (versions, GPUs, MPI, container, loaded libraries)."""
    record = env.full()
    if as_json:
        typer.echo(json.dumps(record, indent=2))
    else:
        from rich.console import Console
        from rich.pretty import Pretty

        Console().print(Pretty(record))
    if check:
        for line in env.library_lines(record):
            print(f"libraries: {line}", file=sys.stderr)
        problems = env.library_problems(record)
        if problems:
            raise BenchError("libraries: " + "; ".join(problems))
        print("libraries: each framework's process loads at most one NCCL and one CUDA runtime, its own",
              file=sys.stderr)


# The frameworks' out-of-memory errors, by type name (no framework import here): torch.cuda.OutOfMemoryError,
# TensorFlow's ResourceExhaustedError (an allocation of the GPU's or the host's memory failed).
OOM_ERRORS = {"OutOfMemoryError": "out of GPU memory", "ResourceExhaustedError": "out of memory"}


def out_of_memory(exc: BaseException) -> str | None:
    """One line for a framework's out-of-memory error: what ran out, the framework's own words, what to try."""
    what = next((OOM_ERRORS[t.__name__] for t in type(exc).__mro__ if t.__name__ in OOM_ERRORS), None)
    if what is None:
        return None
    return f"{what} ({summary_line(exc)[:200]}): try a smaller --batch-size, or --precision amp-bf16"


def _rank_prefix() -> str:
    try:
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
    supervise.die_with_parent()
    supervise.report_faults()
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
    except Stopped as exc:
        why = slurm_time_limit() if exc.signum == signal.SIGTERM else None  # scancel, or the job's --time?
        print(f"{_rank_prefix()}error: {exc}" + (f" ({why})" if why else ""), file=sys.stderr)
        sys.exit(exc.exit_code)
    except BenchError as exc:
        print(f"{_rank_prefix()}error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print(f"{_rank_prefix()}error: stopped by SIGINT", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # an unexpected failure on a rank: one line unless debugging
        if os.environ.get("HVDBENCH_DEBUG"):
            raise

        message = missing_message(exc) if isinstance(exc, ModuleNotFoundError) else out_of_memory(exc)
        if message:  # an optional dependency (which extra brings it), or memory the batch does not fit in
            print(f"{_rank_prefix()}error: {message}", file=sys.stderr)
            sys.exit(1)
        print(f"{_rank_prefix()}internal error: {type(exc).__name__}: {summary_line(exc)}"
              " (HVDBENCH_DEBUG=1 shows the traceback)", file=sys.stderr)
        sys.exit(1)
    sys.exit(rc if isinstance(rc, int) else 0)
