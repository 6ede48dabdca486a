"""bench diagnose: which node, device or link of an allocation is slow, against its peers and a baseline.

Three phases, each on the nodes that are left (bench/commands/diagnose/hosts.py: srun steps in a Slurm allocation, or
ssh and mpirun -H on a host list; with ``--container``, every step inside the container it names, a SIF say):

1. ``devices``: every device alone, all at the same time (bench MODE --np 1 on each, one srun step per node:
   bench/commands/diagnose/alone.py), with telemetry: samples/s per device, and on GPUs the clock-event (throttle)
   reasons that explain a slow one;
2. ``network``: bench allreduce between two nodes at a time, one rank per node, at a small and a large size:
   latency (the small size's time per operation) and busbw (the large one's) per pair. Pairs run in rounds
   of disjoint pairs, all at once within a round; every pair for up to 8 nodes, else a ring of pairs (each
   node in two);
   With ``--data PATH`` (a dataset every node sees) those runs train from it, and each device's input pipeline
   alone (its ``loader_rate``, bench.data.feed) is held against its peers': a slow disk or busy CPUs on a node;
3. ``job``: one run of MODE over all those nodes with per-rank attribution (bench/measure/attribution.py): each
   rank's compute-only step time, and the job's samples/s.

A node whose devices phase fails is a finding and is left out of the phases after it. The figures go
through the rules (bench/commands/diagnose/rules.toml, bench/commands/diagnose/rules.py); the record
(OUTPUT/diagnose-<stamp>/diagnose.json, schema: ``bench schema --diagnose``), a markdown report beside it
and a terminal table say what was found. Exit status: 0 when no finding is an error, 3 when one is.
"""

from __future__ import annotations

import shlex
import shutil
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench import files
from bench.commands.allreduce import BACKENDS
from bench.commands.diagnose import rules as rules_mod
from bench.commands.diagnose.hosts import Commands, HostList, Slurm, Step, run_steps
from bench.commands.diagnose.render import markdown, terminal
from bench.config import byte_size, comma_list, option
from bench.errors import BenchError, check_exit_codes, judged, nagios, restore_handlers, stop_on_signals
from bench.launching.slurm import expand_nodelist, inside_allocation
from bench.modes import MODES
from bench.records import node_patch, store
from bench.records.env import container
from bench.records.header import header, new_run_id, utc_stamp
from bench.records.kinds import Allreduce, Baseline
from bench.records.node_patch import NODE_PATCH_HELP
from bench.records.results import check_output_dir, load_result
from bench.records.schema import Diagnose, Finding, Result

SCHEMA_VERSION = 1
PHASES = ("devices", "network", "job")
FINDINGS_EXIT = 3
ALL_PAIRS_UP_TO = 8
# Short timed runs: what one device does, not a benchmark to quote (--run-args adds to or overrides these).
RUN_DEFAULTS = ("--warmup-steps", "1", "--steps-per-window", "4", "--windows", "3")


def _words(flag: str):
    """A parser of ``flag``'s one string into words, as the shell would split it."""
    def parse(text: str) -> tuple[str, ...]:
        try:
            return tuple(shlex.split(text))
        except ValueError as exc:
            raise BenchError(f"{flag}: {exc}") from None
    return parse


def _hosts(text: str | None) -> tuple[str, ...] | None:
    return comma_list(text) or None if text else None


@dataclass(frozen=True)
class DiagnoseConfig:
    """bench diagnose's configuration: each option declared once, here (the command's flags come from it)."""
    mode: str = option("torch-ddp", "The mode of the devices and job phases.")
    run_args: tuple[str, ...] = option((), "More arguments of those runs, as one string (e.g. '--model resnet50 "
                                       "--image-size 32 --batch-size 4').", parse=_words("--run-args"), shown="")
    phases: tuple[str, ...] = option(PHASES, "Comma-separated: devices, network, job.", parse=comma_list,
                                     shown=",".join(PHASES))
    hosts: tuple[str, ...] | None = option(None, "Comma-separated nodes, without Slurm (ssh, mpirun -H); default: "
                                           "the Slurm allocation's.", parse=_hosts)
    devices_per_node: int = option(1, "Devices (GPUs, or 1 on CPU) per node.")
    pairs: str = option("auto", "Node pairs of the network phase: all, ring, or auto (all up to 8 nodes).")
    backend: str = option("torch", "bench allreduce backend of the network phase.")
    small_bytes: int = option(4096, "The network phase's latency size.", parse=byte_size, shown="4K")
    large_bytes: int = option(64 << 20, "Its bandwidth size (a multiple of the small one).", parse=byte_size,
                              shown="64M")
    samples: int = option(3, "Timed samples per size and pair.")
    data: str | None = option(None, "A dataset folder every node sees: the devices phase trains from it (--data) "
                              "and each node's input pipeline is held against its peers'.")
    attribution_steps: int = option(5, "Attribution steps of each kind in the job phase (the fastest counts).")
    rules: str | None = option(None, "A rules file (default: bench/commands/diagnose/rules.toml).")
    baseline: str | None = option(None, "Hold every figure against this saved baseline too; several, comma-"
                                  "separated (a fleet's healthy runs, each from --save-baseline), merge into one: "
                                  "each member's figure the median over the baselines that have it.")
    save_baseline: str | None = option(None, "Save this run's figures as a baseline (a run without findings only; "
                                       "never overwritten).")
    output: str = option("results", "Directory (seen by every node) for diagnose-<stamp>/.")
    step_timeout: float = option(900.0, "Seconds one phase's command may take.")
    port: int = option(29500, "With --hosts: torch.distributed's rendezvous port.")
    container: tuple[str, ...] = option((), "Run every step in this container: the command that starts one, as one "
                                        "string (e.g. 'apptainer exec --nv /shared/hvdbench.sif'), bench inside "
                                        "it; diagnose itself runs where srun is (docs/diagnose.md).",
                                        parse=_words("--container"), shown="")
    exit_codes: str = option("bench", "Exit statuses: bench (3 on an error finding, 1 when it could not run), or "
                                      "nagios (0 ok, 1 a warning, 2 an error, 3 could not run).")
    node_patch: str = option("", NODE_PATCH_HELP.replace("this node's verdict", "each node's verdict"))
    nodes: tuple[str, ...] = field(default=())  # resolved: the allocation's or the host list (main)

    def check(self) -> None:
        check_exit_codes(self.exit_codes)
        if self.mode.split(":")[0] not in MODES:
            raise BenchError(f"unknown mode '{self.mode}' (choose from {', '.join(MODES)})")
        bad = [p for p in self.phases if p not in PHASES]
        if bad or not self.phases:
            raise BenchError(f"--phases takes {', '.join(PHASES)} (got {','.join(self.phases) or 'none'})")
        if self.backend not in BACKENDS:
            raise BenchError(f"unknown --backend '{self.backend}' (choose from {', '.join(BACKENDS)})")
        if self.pairs not in ("auto", "all", "ring"):
            raise BenchError("--pairs takes auto, all or ring")
        if self.devices_per_node < 1 or self.samples < 1 or self.attribution_steps < 2 or self.step_timeout <= 0:
            raise BenchError("--devices-per-node and --samples must be at least 1, --attribution-steps at least 2, "
                             "--step-timeout above 0")
        if self.large_bytes <= self.small_bytes or self.large_bytes % self.small_bytes:
            raise BenchError("--large-bytes must be a multiple of --small-bytes, and larger")
        if len(self.nodes) < 1:
            raise BenchError("no nodes to diagnose")
        if "network" in self.phases and len(self.nodes) < 2:
            raise BenchError("the network phase needs 2 nodes at least (or --phases devices,job)")


def resolve_nodes(hosts: tuple[str, ...] | None) -> tuple[str, ...]:
    """The host list, or the Slurm allocation's nodes; one line when there is neither."""
    import os

    if hosts:
        if len(set(hosts)) != len(hosts):
            raise BenchError(f"--hosts names a node twice: {','.join(hosts)}")
        return hosts
    if "SLURM_STEP_ID" in os.environ:
        raise BenchError("bench diagnose starts its own job steps: run it in the allocation (salloc, sbatch), "
                         "not under srun; with a SIF, run it there with --container 'apptainer exec --nv SIF' "
                         "(docs/diagnose.md)")
    if not inside_allocation():
        raise BenchError("bench diagnose runs inside a Slurm allocation (salloc -N4 bench diagnose) or on a "
                         "host list (--hosts node1,node2,...)")
    return tuple(expand_nodelist(os.environ.get("SLURM_JOB_NODELIST", "")))


def pair_rounds(nodes: list[str], how: str) -> list[list[tuple[str, str]]]:
    """Rounds of disjoint node pairs. all: every pair, n-1 rounds (the circle method; n odd adds a rest);
    ring: each node with the next, in 2 rounds (3 when n is odd)."""
    n = len(nodes)
    if how == "auto":
        how = "all" if n <= ALL_PAIRS_UP_TO else "ring"
    if n == 2:
        return [[(nodes[0], nodes[1])]]
    if how == "ring":
        pairs = [(nodes[i], nodes[(i + 1) % n]) for i in range(n)]
        rounds: list[list[tuple[str, str]]] = []
        for pair in pairs:  # first round that has neither node yet
            for r in rounds:
                if not {x for p in r for x in p} & set(pair):
                    r.append(pair)
                    break
            else:
                rounds.append([pair])
        return rounds
    circle = [*nodes, None] if n % 2 else list(nodes)
    m = len(circle)
    rounds = []
    for _ in range(m - 1):
        r = [(circle[i], circle[m - 1 - i]) for i in range(m // 2)]
        rounds.append([tuple(sorted(p)) for p in r if None not in p])
        circle = [circle[0], circle[-1], *circle[1:-1]]
    return rounds


def signature(cfg: DiagnoseConfig) -> dict[str, Any]:
    """What a baseline must share with the run it is held against."""
    return {"mode": cfg.mode, "run_args": [*RUN_DEFAULTS, *cfg.run_args], "devices_per_node": cfg.devices_per_node,
            "backend": cfg.backend, "small_bytes": cfg.small_bytes, "large_bytes": cfg.large_bytes,
            **({"data": cfg.data} if cfg.data else {})}  # a run from a dataset is held against one from it only


def load_baseline(cfg: DiagnoseConfig) -> dict[str, Any] | None:
    """The figures to hold this run against: one saved baseline's, or several merged (merge_baselines); each
    measured as this run is."""
    if cfg.baseline is None:
        return None
    figures = []
    for path in [p.strip() for p in cfg.baseline.split(",") if p.strip()]:
        try:
            data = store.load(path, Baseline)
        except BenchError as exc:
            raise BenchError(f"{exc} (bench diagnose --save-baseline writes a baseline)") from None
        if data.signature != signature(cfg):
            differ = [k for k, v in signature(cfg).items() if data.signature.get(k) != v]
            raise BenchError(f"baseline {path} was measured differently ({', '.join(differ)}): diagnose with "
                             "the same options, or save a new baseline")
        figures.append(data.figures)
    return merge_baselines(figures)


def merge_baselines(figures: list[dict[str, dict[str, dict[str, Any]]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Several baselines' figures as one (a fleet's: each healthy run saved on its nodes): kind -> member -> figure,
    each number the median of that member's figure over the baselines that have it, so that a node measured in
    several is held against its usual self, and a node new to all of them against the kind's median
    (rules.evaluate)."""
    merged: dict[str, dict[str, dict[str, list]]] = {}
    for one in figures:
        for kind, members in one.items():
            for member, figs in members.items():
                for name, value in figs.items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        merged.setdefault(kind, {}).setdefault(member, {}).setdefault(name, []).append(value)
    return {kind: {member: {name: statistics.median(values) for name, values in figs.items()}
                   for member, figs in members.items()} for kind, members in merged.items()}


def _one_file(folder: Path) -> Path | None:
    """The one record a step wrote into its folder; None for none, or several."""
    found = sorted(folder.glob("*.json")) if folder.is_dir() else []
    return found[0] if len(found) == 1 else None


def _one_result(folder: Path) -> Result | None:
    path = _one_file(folder)
    return load_result(path) if path else None


def _mpi(name: str) -> bool:
    return MODES[name.split(":")[0]].needs_mpi


class Diagnosis:
    """One diagnose: its folder, its executor, the phases' steps, figures and findings."""

    def __init__(self, cfg: DiagnoseConfig) -> None:
        self.cfg = cfg
        stamp = utc_stamp()
        self.run_id = new_run_id("diagnose", stamp)
        self.folder = Path(cfg.output).resolve() / f"diagnose-{stamp}-{self.run_id[-8:]}"
        nodes = list(cfg.nodes)
        self.exe = (HostList(nodes, cfg.devices_per_node, cfg.port, cfg.step_timeout) if cfg.hosts
                    else Slurm(nodes, cfg.devices_per_node))
        self.commands = Commands(cfg.container)
        self.healthy = list(nodes)  # nodes still in: a node whose devices phase failed is left out
        self.figures: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in rules_mod.KINDS}
        self.findings: list[dict[str, Any]] = []
        self.phases: dict[str, dict[str, Any]] = {}

    def run_args(self) -> list[str]:
        return [*RUN_DEFAULTS, *self.cfg.run_args]

    def check_launchers(self) -> None:
        """One line, before any step, when a command the steps start with is not here (diagnose run inside a
        container that has no srun, say)."""
        missing = [c for c in self.exe.launchers(self.cfg.phases) if shutil.which(c) is None]
        if missing:
            inside = (f" (this process runs in a container, {container()}: run bench diagnose where {missing[0]} is, "
                      "with --container naming the one the steps run in; docs/diagnose.md)" if container() else "")
            raise BenchError(f"bench diagnose starts its steps with {' and '.join(missing)}, not found on PATH here"
                             + inside)

    def _phase(self, name: str, steps: list[list[Step]]) -> list[Step]:
        """Run the rounds of ``steps`` one after the other; record them; every step, run."""
        t0 = time.monotonic()
        done = []
        for round_ in steps:
            run_steps(round_, self.cfg.step_timeout)
            done += round_
            if any(s.failure() for s in round_) and (why := self.exe.gone()):
                raise BenchError(f"{why} during the {name} phase: no verdict, no record (the phases' output is "
                                 f"in {self.folder})")
        self.phases[name] = {"seconds": time.monotonic() - t0, "steps": [
            {"label": s.label, "members": list(s.members), "command": s.argv, "exit_code": s.code,
             "timed_out": s.timed_out, "seconds": s.seconds, "failure": s.failure(), "log": str(s.log)}
            for s in done]}
        return done

    def _did_not_run(self, kind: str, where: str, step: Step) -> None:
        self.findings.append(rules_mod.finding(kind, where, None, "a result", "did-not-run: the phase's command "
                                               f"failed: {step.failure()}", "error", "did-not-run", None,
                                               phase=step.label))

    def devices(self) -> None:
        out = self.folder / "devices"
        steps = [Step("devices", (node,), self.exe.alone(node, self.commands.alone(
            str(out / node), str(self.cfg.devices_per_node), self.cfg.mode, *self.run_args(),
            *(["--data", self.cfg.data] if self.cfg.data else []))),
            self.folder / "logs" / f"devices-{node}.log") for node in self.healthy]
        for step in self._phase("devices", [steps]):
            (node,) = step.members
            per_device = []
            for i in range(self.cfg.devices_per_node):
                member = node if self.cfg.devices_per_node == 1 else f"{node}/{i}"
                result = _one_result(out / f"{node}-{i}")
                if result is None:
                    continue
                per_device.append(member)
                self.figures["device"][member] = {"samples_per_sec": result.summary.samples_per_sec_total,
                                                  **_device_telemetry(result), **_device_input(result)}
            if len(per_device) < self.cfg.devices_per_node or step.failure():
                self._did_not_run("device", node, step)
                self.healthy.remove(node)

    def network(self) -> None:
        out = self.folder / "network"
        if len(self.healthy) < 2:
            self.phases["network"] = {"seconds": 0.0, "steps": [], "skipped": "fewer than 2 nodes left"}
            return
        factor = self.cfg.large_bytes // self.cfg.small_bytes
        rounds = [[Step("network", pair, self.exe.together(list(pair), 1, self.commands.bench(
            "allreduce", "--backend", self.cfg.backend, "--min-bytes", str(self.cfg.small_bytes), "--max-bytes",
            str(self.cfg.large_bytes), "--factor", str(factor), "--models", "", "--samples", str(self.cfg.samples),
            "--output", str(out / "+".join(pair))), mpi=self.cfg.backend.startswith("horovod")),
            self.folder / "logs" / f"network-{'+'.join(pair)}.log") for pair in r]
            for r in pair_rounds(self.healthy, self.cfg.pairs)]
        for step in self._phase("network", rounds):
            member = "+".join(step.members)
            path = _one_file(out / member)
            if step.failure() or path is None:
                self._did_not_run("pair", member, step)
                continue
            result = store.load(path, Allreduce)
            rows = sorted(result.rows, key=lambda r: r.bytes)
            self.figures["pair"][member] = {"busbw_GBps": rows[-1].busbw_GBps, "latency_us": rows[0].time_s * 1e6,
                                            "all_correct": result.all_correct}
            if not result.all_correct:
                self.findings.append(rules_mod.finding("pair", member, False, True, "allreduce-correct: the sum "
                                                       "came back wrong", "error", "allreduce-correct", None))

    def job(self) -> None:
        out = self.folder / "job"
        if len(self.healthy) * self.cfg.devices_per_node < 2:
            self.phases["job"] = {"seconds": 0.0, "steps": [], "skipped": "fewer than 2 devices left"}
            return
        (step,) = self._phase("job", [[Step("job", tuple(self.healthy), self.exe.together(
            self.healthy, self.cfg.devices_per_node, self.commands.bench(
                self.cfg.mode, *self.run_args(), "--attribution-steps", str(self.cfg.attribution_steps),
                "--output", str(out)), mpi=_mpi(self.cfg.mode)), self.folder / "logs" / "job.log")]])
        result = _one_result(out)
        if step.failure() or result is None:
            self._did_not_run("job", "job", step)
            return
        for kind, members in rules_mod.result_figures(result).items():
            self.figures[kind].update(members)
        section = result.attribution
        if section is not None and section.measured:
            self.phases["job"]["straggler"] = section.straggler.model_dump() if section.straggler else None
        else:
            self.phases["job"]["attribution"] = (section.reason if section else None) or "not measured"

    def run(self) -> Diagnose:
        rules = rules_mod.load(self.cfg.rules)
        baseline = load_baseline(self.cfg)
        check_output_dir(self.cfg.output)
        self.folder.mkdir(parents=True)
        started = time.monotonic()
        for phase in PHASES:
            if phase in self.cfg.phases:
                getattr(self, phase)()
        self.findings += rules_mod.evaluate(rules, self.figures, baseline)
        self.findings += rules_mod.common_member(self.findings)
        self.findings += _throttled(self.figures["device"], self.findings)
        return Diagnose(
            **header(self.run_id, store.Kind.DIAGNOSE, SCHEMA_VERSION),
            config={**asdict(self.cfg), "rules": str(self.cfg.rules or rules_mod.DEFAULT_RULES)},
            executor=self.exe.name, nodes=list(self.cfg.nodes),
            left_out=sorted(set(self.cfg.nodes) - set(self.healthy)),
            seconds=time.monotonic() - started, phases=self.phases, figures=self.figures,
            rules=[r.text() + f" [{r.severity}]" for r in rules], baseline=self.cfg.baseline,
            findings=self.findings, passed=not any(f.severity == "error" for f in self.findings),
            accept=rules_mod.accept(list(self.cfg.nodes), self.findings),
        )


def _device_input(result: Result) -> dict[str, Any]:
    """A device's input pipeline (a --data run): its rate alone and the share of its steps spent waiting."""
    section = result.input
    if section is None or section.source != "dataset":
        return {}
    (rank,) = section.per_rank
    return {"loader_rate": rank.loader_rate, "data_wait_share": rank.input_share}


def _device_telemetry(result: Result) -> dict[str, Any]:
    """A device's clock-event (throttle) reasons in its timed windows, where telemetry saw a GPU."""
    gpus = [g for n in result.telemetry.nodes for g in n.gpus]
    if not gpus:
        return {}
    power = [g.power_w_mean for g in gpus if g.power_w_mean is not None]
    return {"throttled": any(g.throttled for g in gpus),
            "throttle_reasons": sorted({r for g in gpus for r in g.throttle_reasons}),
            "power_w_mean": statistics.fmean(power) if power else None}


def _throttled(devices: dict[str, dict[str, Any]], found: list[Finding]) -> list[Finding]:
    """Telemetry's why: each flagged device's throttle reasons joined to its finding, and a warning for a
    device that throttled without being flagged."""
    extra = []
    flagged = {f.where for f in found if f.kind == "device"}
    for member, figs in devices.items():
        if not figs.get("throttled"):
            continue
        why = f"throttled: {', '.join(figs['throttle_reasons'])}"
        for f in found:
            if f.kind == "device" and f.where == member:
                f.why = why
        if member not in flagged:
            extra.append(rules_mod.finding("device", member, figs["throttle_reasons"], "no slowdown reasons",
                                           "throttled: the GPU slowed its clocks in the timed windows", "warning",
                                           "throttle_reasons", None, why=why))
    return extra


def baseline_record(record: Diagnose, cfg: DiagnoseConfig) -> Baseline:
    return Baseline(kind=store.Kind.BASELINE.value, from_run=record.run_id, created_utc=record.created_utc,
                    nodes=record.nodes, signature=signature(cfg), figures=record.figures)


def write(record: Diagnose, folder: Path) -> Path:
    """diagnose.json and diagnose.md in ``folder``; the JSON's path."""
    path = store.write(folder / "diagnose.json", record)
    files.write_new(folder / "diagnose.md", markdown(record))
    return path


def main(cfg: DiagnoseConfig) -> int:
    """`bench diagnose`: the nodes resolved, then every phase, the record and the report; the exit status. A stop
    signal stops the phase's processes (the steps' own handling) and then this command."""
    def run() -> int:
        nonlocal cfg
        cfg = replace(cfg, nodes=resolve_nodes(cfg.hosts))
        old = stop_on_signals()
        try:
            return diagnose(cfg)
        finally:
            restore_handlers(old)
    return judged(run, cfg.exit_codes)


def diagnose(cfg: DiagnoseConfig) -> int:
    """Run, write, print; the exit status (0 healthy, FINDINGS_EXIT with an error finding)."""
    cfg.check()
    if cfg.save_baseline and Path(cfg.save_baseline).exists():
        raise BenchError(f"baseline {cfg.save_baseline} already exists; not overwritten")
    for node in cfg.nodes if cfg.node_patch else ():  # a node without a Kubernetes name is one line, first
        node_patch.prepare(cfg.node_patch, node.split(".")[0].lower())
    d = Diagnosis(cfg)
    d.check_launchers()
    record = d.run()
    path = write(record, d.folder)
    terminal(record)
    print(f"record: {path}\nreport: {path.with_suffix('.md')}")
    if cfg.node_patch:
        for verdict in record.accept or []:
            for line in node_patch.write(cfg.node_patch, verdict.node.split(".")[0].lower(), "diagnose",
                                         verdict.errors, verdict.warnings, utc_stamp(), str(path)):
                print(line)
    if cfg.save_baseline:
        if not record.passed:
            print(f"baseline not saved: this run has findings ({cfg.save_baseline} needs a healthy run)")
        else:
            store.write(Path(cfg.save_baseline), baseline_record(record, cfg))
            print(f"baseline: {cfg.save_baseline}")
    if cfg.exit_codes == "nagios":
        return nagios(sum(f.severity == "error" for f in record.findings),
                      sum(f.severity == "warning" for f in record.findings))
    return 0 if record.passed else FINDINGS_EXIT

