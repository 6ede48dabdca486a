"""The ``bench`` command line: thin typer commands over bench.run, bench.records.env and the registries."""

from __future__ import annotations

import inspect
import os
import signal
import sys
from collections.abc import Callable
from enum import Enum
from typing import Annotated, Any

import typer
from typer.exceptions import TyperException

import bench.run
from bench import __version__, plugins, scratch
from bench.commands import (
    allreduce,
    compare,
    converge,
    data,
    history,
    info,
    peak,
    predict,
    preflight,
    report,
    run_file,
    soak,
    sweep,
    tune,
    verify,
)
from bench.commands import kubernetes as k8s
from bench.commands.converge import ConvergeConfig
from bench.commands.diagnose import DiagnoseConfig
from bench.commands.diagnose import main as diagnose_main
from bench.commands.run_file import RunFileConfig
from bench.commands.verify import VerifyConfig
from bench.config import PLUGIN_OPTIONS, RunConfig, declared, option_specs
from bench.data import make
from bench.data.make import MakeConfig
from bench.errors import BenchError, Stopped, one_line
from bench.launching import envs, supervise
from bench.launching.detect import detect
from bench.launching.slurm import slurm_time_limit
from bench.modes import MODES
from bench.tfutil import VERBOSE_ENV

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
                                                help="Print the version and exit.")] = False,
          verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show the frameworks' start-up logging "
                                                "(TensorFlow's, absl's), which bench drops by default "
                                                f"(the same as {VERBOSE_ENV}=1).")] = False) -> None:
    if verbose:  # in the environment: the ranks and children this command starts inherit it
        os.environ[VERBOSE_ENV] = "1"


# Every command's aliases (bench.config.Option.aliases), by the words that name the command ("torch-ddp", "data bench"):
# alias -> the flag it stands for. Filled as the commands are registered; read by spelled().
ALIASES: dict[str, dict[str, str]] = {}


def add_aliases(command: str, specs: list[tuple[str, Any, Any, Any]]) -> None:
    """Keep the aliases that the options in ``specs`` ((name, type, default, Option), as declared) give
    ``command``."""
    for name, _, _, how in specs:
        for alias in how.aliases:
            ALIASES.setdefault(command, {})[alias] = how.primary(name)


def option_parameters(only_sweep: bool = False) -> list[inspect.Parameter]:
    """The typer parameters of the run options as RunConfig (and the plugins) declare them; ``only_sweep``:
    those `bench sweep` passes to every cell."""
    params = []
    for name, type_, default, how in option_specs():
        if only_sweep and not how.sweep:
            continue
        decls = [how.flag] if how.flag else []
        if how.parse is not None:  # written as text (a size): RunConfig parses it (bench.config.Option.parse)
            type_ = str | None if default is None else str
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
                     on: typer.Typer | None = None, run_options: str | None = None, group: str = "") -> None:
    """Register ``bench NAME``: its flags are ``cls``'s declared options, its body builds the configuration
    (validated on construction) and hands it to ``main``, which renders its own output; an int it returns is the
    exit status. ``run_options``: the command also takes the run options, as RunConfig declares them, and hands
    them over in the configuration's ``common`` (``"sweep"``: those a sweep passes to every cell, as set) or ``run``
    (``"all"``: every one, with its value)."""
    own = declared(cls)
    parsers = {field: how.parse for field, _, _, how in own if how.parse is not None}
    names = {field for field, *_ in own}

    def command(**options: Any) -> None:
        values = {k: parsers[k](v) if k in parsers and isinstance(v, str) else v for k, v in options.items()
                  if k in names}
        rest = {k: v for k, v in options.items() if k not in names}
        if run_options == "sweep":
            values["common"] = passed_to_cells(rest)
        elif run_options == "all":
            values["run"] = config_arguments(rest)
        code = main(cls(**values))
        if code:
            raise typer.Exit(code)

    extra = option_parameters(only_sweep=run_options == "sweep") if run_options else []
    add_aliases(f"{group} {name}".strip(), own + ([s for s in option_specs() if run_options == "all" or s[3].sweep]
                                                  if run_options else []))
    command.__signature__ = inspect.Signature([*command_parameters(cls), *extra])
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
    add_aliases(_spec.name, option_specs())


def passed_to_cells(passed: dict[str, Any]) -> dict[str, Any]:
    """The run options a sweep or bench converge passes to every cell: those set (None leaves the run's own
    default; a flag counts when it differs from its default)."""
    defaults = {name: default for name, _, default, _ in option_specs()}
    return config_arguments({name: value.value if isinstance(value, Enum) else value
                             for name, value in passed.items()
                             if value is not None and not (isinstance(value, bool) and value == defaults[name])})


declared_command("run", RunFileConfig, run_file.main, "Run the benchmark a JSON run configuration describes "
                 "(RunConfig's fields; bench sweep writes one per cell).")
declared_command("schema", info.SchemaConfig, info.schema, "Print the JSON Schema of a record kind: the result "
                 "file every run writes (the default), or verify, allreduce, peak, diagnose, diagnose-baseline, "
                 "data-bench, converge, tune or soak.")
declared_command("models", info.ModelsConfig, info.models, "List the models: workload kind, parameters (at their "
                 "default classes or vocabulary), input sizes.")
declared_command("env", info.EnvConfig, info.env, "Print the environment every result records (versions, GPUs, "
                 "MPI, container, loaded libraries).")
# bench sweep and bench converge: their own options, then every run option declared for sweeps (Option.sweep).
declared_command("sweep", sweep.SweepConfig, sweep.main, "Run a matrix of benchmarks, one run per cell, "
                 "resumable (here, or one srun step per cell in Slurm).", run_options="sweep")
declared_command("converge", ConvergeConfig, converge.main, "Train to a target in several modes and world sizes, "
                 "each repeated: the time to the target, the final accuracies, one plot and PASS or FAIL "
                 "(docs/training.md).", run_options="sweep")
declared_command("tune", tune.TuneConfig, tune.main, "Find the batch past which throughput stops growing: the batch "
                 "doubles while it gains >= 2% and memory lasts (docs/profiles.md).", run_options="sweep")
declared_command("report", report.ReportConfig, report.main, "Write report.md, report.csv and plots from results "
                 "(never re-runs anything).")
declared_command("compare", compare.CompareConfig, compare.main, "Compare two results or sweeps metric by metric: "
                 "relative change, and significance from repeated runs.")
declared_command("predict", predict.PredictConfig, predict.main, "Predict images/s and scaling efficiency at N GPUs "
                 "from a 1-GPU step time and the network (see formula).")
declared_command("peak", peak.PeakConfig, peak.main, "The achievable matrix-multiply rate of this device (a GEMM "
                 "sweep): the measured peak results' MFU uses.")
declared_command("preflight", preflight.PreflightConfig, preflight.main, "Find the environment faults that spoil a "
                 "run before it: driver vs the frameworks' CUDA, GPUs (other processes, ECC, pending resets), the "
                 "network interfaces, the InfiniBand ports and the kernel log's Xid events (exit 1 on an error).")
declared_command("soak", soak.SoakConfig, soak.main, "Load every GPU of the node for a while and judge it as "
                 "operators accept a node: throttling, temperature spread, each GPU's rate, power, ECC, and one "
                 "product compared bit for bit (exit 1 on an error).")
declared_command("verify", VerifyConfig, verify.main, "Check that every distributed mode trains what one process "
                 "trains on the global batch (exit 1 on FAIL).")
declared_command("diagnose", DiagnoseConfig, diagnose_main, "Find the slow node, device or link: devices alone, "
                 "node pairs, the full job; rules over the figures (exit 3 when one finds an error).")
declared_command("allreduce", allreduce.AllreduceConfig, allreduce.main, "Allreduce (or allgather, all-to-all) "
                 "microbenchmark over message sizes: time, algbw and busbw (nccl-tests definitions).")
# bench k8s: its own options, then every run option (the run its pods start).
declared_command("k8s", k8s.K8sConfig, k8s.main, "Print the Kubernetes manifests that run MODE "
                 "(docs/kubernetes.md): kubectl apply -f - reads them.", run_options="all")
data_app = typer.Typer(help="Datasets on disk: make one, and measure what input pipelines read from it.",
                       no_args_is_help=True)
app.add_typer(data_app, name="data")
declared_command("make", MakeConfig, make.main, "Write a dataset for trials and tests (ImageNet folder, TFRecord, "
                 "CIFAR-10 or tokens; synthetic or scikit-learn's real digits), deterministic by seed.", data_app,
                 group="data")
declared_command("bench", data.DataBenchConfig, data.main, "The input pipeline alone, no model: images/s of each "
                 "loader with 1..K workers, the decode rate per core and the cores that feed a node's GPUs.", data_app,
                 group="data")
history_app = typer.Typer(help="The results database over time (docs/history.md): index the records, show a "
                          "node's figures, check each node against its own past and the fleet, export them.",
                          no_args_is_help=True)
app.add_typer(history_app, name="history")
declared_command("add", history.HistoryAddConfig, history.add, "Index record files in the results database (SQLite "
                 "in the results folder, or --db): each file one row, adding it again changes nothing.", history_app,
                 group="history")
declared_command("show", history.HistoryShowConfig, history.show, "A node's, a GPU's or a cell's figures over time, "
                 "with what changed between runs (--plot draws them).", history_app, group="history")
declared_command("check", history.HistoryCheckConfig, history.check, "Each node's newest figure against its own past "
                 "and the fleet's same GPU model, and nodes gone stale (exit 3 on an error, as diagnose).",
                 history_app, group="history")
declared_command("export", history.HistoryExportConfig, history.export, "Write the history where monitoring reads "
                 "it: prometheus DIR (node_exporter's textfile collector), mlflow URI (a tracking server).",
                 history_app, group="history")

# Spellings the parser does not take as they are, put in the form it does before it reads them: each command's
# aliases (ALIASES: Horovod's script's names, -np, report's old --out), and --compile with no mode after it
# (torchtitan's and timm's flag), which is --compile default. Typer lists no alias apart and has no option whose
# value may be left out, hence this one step.
BARE_COMPILE = "default"
GROUPS = ("data", "history")  # commands whose next word names the command proper (bench data bench)


def spelled(args: list[str]) -> list[str]:
    """The command line with every spelling above put in the parser's form: ``torch-ddp --num-iters 5`` ->
    ``torch-ddp --windows 5``, ``report A --out X`` -> ``report A --output X``; ``--compile`` last or followed by
    another option -> ``--compile default``. Everything after ``--`` is left as it is."""
    words = [a for a in args if not a.startswith("-")]
    command = " ".join(words[:2]) if words[:1] and words[0] in GROUPS else " ".join(words[:1])
    aliases = ALIASES.get(command, {})
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        name, eq, value = arg.partition("=")
        if name in aliases:
            arg = aliases[name] + eq + value
        out.append(arg)
        if arg == "--compile" and (i + 1 == len(args) or args[i + 1].startswith("-")):
            out.append(BARE_COMPILE)
    return out


def _rank_prefix() -> str:
    try:
        info = detect()
    except BenchError:
        return ""
    return f"rank {info.rank}: " if info.launcher != "none" else ""


def main() -> None:
    scratch.take()  # first: its exit handler must run after every library's (bench.scratch)
    supervise.die_with_parent()
    supervise.report_faults()
    try:
        rc = app(args=spelled(sys.argv[1:]), standalone_mode=False)
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
        line, code = one_line(exc)
        print(f"{_rank_prefix()}{line}", file=sys.stderr)
        sys.exit(code)
    except KeyboardInterrupt:
        print(f"{_rank_prefix()}error: stopped by SIGINT", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # an unexpected failure on a rank: one line unless debugging
        if os.environ.get("HVDBENCH_DEBUG"):
            raise
        line, code = one_line(exc)
        print(f"{_rank_prefix()}{line}", file=sys.stderr)
        sys.exit(code)
    sys.exit(rc if isinstance(rc, int) else 0)
