"""bench compare A B: two results or two sweeps, metric by metric, cell by cell.

relative change = (B - A) / A. For throughput a drop is a regression; for times and energy a rise is.
A throughput change is called significant only from repeated runs: when each side has two or more runs of the
cell (on the same hosts) and the between-run 95% intervals of their mean throughput do not overlap
(bench.records.collect.significant). One run a side gives only within-run intervals, which leave out what changes
from launch to launch (NCCL's algorithm choice, cuDNN autotuning, clocks, heat): shown as undecided, with the
number of runs each side had, as are overlapping intervals (they do not show that there is no difference); other
metrics are n/a.

A run that read a dataset (``--data``) and a synthetic run of the same settings are paired when each side has
just that one input for the cell; their headline row then carries the share of throughput the input pipeline
costs: ``input_cost = 1 - data run's throughput / synthetic run's throughput``. Likewise a run of the paper's
profile and one of ``--tuned`` (batch, memory format, compiler and optimizer settings apart) are paired when each
side has just that one for the cell: ``bench compare results/paper results/tuned`` puts them side by side, the
cell naming what A ran with. With ``--max-regression PCT`` the
command exits 1 when the chosen metric regressed by more than PCT percent in any cell (for CI use). With
``--rules FILE`` bench diagnose's rules are applied to B against A (apply_rules): findings, Accept per node of B,
exit 1 on an error finding. Both checks hold B only against a baseline: a cell A ran with the same settings. A
pair of different settings (data against synthetic, paper against tuned) shows what the difference costs, not a
regression, so it is named as not checked; where every cell is such a pair the check has nothing to hold and
fails in one line rather than pass.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.commands.diagnose import rules as rules_mod
from bench.commands.diagnose.render import accept_rows
from bench.config import option
from bench.errors import BenchError
from bench.records.collect import STRICT_HELP, load_results, significant, table_cells
from bench.records.metrics import METRICS, find
from bench.records.results import tracker_warnings
from bench.records.schema import Finding, NodeAccept, Result
from bench.tables import never_cut

# The metrics compared, from the registry (bench.records.metrics): throughput, start-up and energy.
COMPARED = ("samples_per_sec_total", "samples_per_sec_per_gpu", "samples_per_sec_wall_total", "tokens_per_sec_total",
            "model_tflops_per_gpu", "init_s", "first_step_s", "energy_per_sample_j")


@dataclass(frozen=True)
class CompareConfig:
    """bench compare's configuration: each option declared once, here (the command's flags come from it)."""
    a: str = option("", "Baseline: a result file or a sweep folder.", argument=True)
    b: str = option("", "Candidate: a result file or a sweep folder.", argument=True)
    metric: str = option("samples_per_sec_total", "Metric that --max-regression checks.")
    max_regression: float | None = option(None, "Exit 1 when METRIC regressed by more than this many percent in "
                                          "any cell.")
    strict: bool = option(False, STRICT_HELP, flag="--strict")
    rules: str | None = option(None, "Apply a rules file (bench diagnose's format; 'default' for its own) to B, "
                               "holding it against A: print the findings and Accept per node, exit 1 on an error.")

    def __post_init__(self) -> None:
        if not self.a or not self.b:
            raise BenchError("bench compare takes two results or sweeps: bench compare A B")
        object.__setattr__(self, "metric", find(self.metric).key)  # a name or alias the registry knows


@dataclass(frozen=True)
class Change:
    """One metric of one cell, A against B (compare_cells)."""
    cell: str
    metric: str  # a registry name (bench.records.metrics)
    a: float
    b: float
    change: float  # (b - a) / a
    regression: float  # the change in the direction that is worse: -change where higher is better
    significant: bool | None = None  # the headline only: beyond run-to-run noise (collect.significant)
    runs: tuple[int, int] | None = None  # the headline only: each side's runs of the cell
    input_cost: float | None = None  # the headline only, where one side read a dataset (input_cost)
    loose: bool = False  # a pair of different settings (Cell.loose): never a regression


def significance(row: Change) -> str:
    """The table's word on a change: yes (the between-run intervals do not overlap); undecided where they overlap
    (an overlap does not show that there is no difference, only that these runs cannot tell) or where a side has
    fewer than two runs; n/a for a metric the call is not made for."""
    if row.runs is None:
        return "n/a"
    if row.significant is True:
        return "yes"
    if row.significant is False:
        return f"undecided: between-run intervals overlap ({row.runs[0]} vs {row.runs[1]} runs)"
    return f"undecided: {row.runs[0]} vs {row.runs[1]} runs; needs 2+ each"


def main(cfg: CompareConfig) -> None:
    """The table of every cell's metrics, the input pipeline's cost where a pair shows it, what either side's run
    warned of (a busy host, graphs compiled in the windows: bench.records.results.tracker_warnings), the rules'
    findings and Accept per node (--rules), and the --max-regression check (one line and exit 1 when a cell
    regressed more)."""
    from rich.console import Console
    from rich.table import Table

    rules = load_rules(cfg.rules) if cfg.rules else None  # a bad rule file stops before any table
    cells = matched(Path(cfg.a), Path(cfg.b), cfg.strict)
    rows = compare_cells(cells)
    console = Console()
    table = Table("cell", "metric", "A", "B", "change", "significant", title=f"{cfg.a} -> {cfg.b}")
    for r in rows:
        table.add_row(r.cell, r.metric, f"{r.a:.4g}", f"{r.b:.4g}", f"{r.change:+.1%}", significance(r))
    console.print(never_cut(table, "cell", "metric"))
    for r in rows:
        if r.input_cost is not None:
            print(f"input pipeline: costs {r.input_cost:.1%} of the synthetic throughput in {r.cell}")
    for c in cells:  # what each side's run printed after its own table: a change may be that, not the code's
        for side, result in (("A", c.a), ("B", c.b)):
            for line in tracker_warnings(result):
                print(f"{side} warned in {c.label}: {line.removeprefix('warning: ')}")
    failed = []
    checks = " and ".join(name for name, asked in (("--rules", rules is not None),
                                                    ("--max-regression", cfg.max_regression is not None)) if asked)
    if checks:
        pairs = [c.label for c in cells if c.loose]
        if pairs:
            print(f"not held to {checks} (different settings, not a baseline): {'; '.join(pairs)}")
        if len(pairs) == len(cells):
            raise BenchError(f"{checks}: {cfg.a} and {cfg.b} share no cell of the same settings, only pairs of "
                             "different input or profile: nothing to hold B against")
    if rules is not None:
        verdict = apply_rules(rules, [c for c in cells if not c.loose])
        print_verdict(console, verdict, cfg.rules)
        if verdict.errors:
            failed.append(f"{verdict.errors} error finding(s) under the rules in {cfg.rules}")
    if cfg.max_regression is not None:
        bad = regressions(rows, cfg.metric, cfg.max_regression)
        if bad:
            worst = max(bad, key=lambda r: r.regression)
            failed.append(f"{cfg.metric} regressed by {worst.regression:.1%} in {worst.cell} "
                          f"(more than {cfg.max_regression:g}% allowed)")
    if failed:
        raise BenchError("; ".join(failed))


@dataclass(frozen=True)
class Cell:
    """A cell both sides ran: its words, A's and B's newest result, and each side's runs of it (newest first)."""
    label: str
    key_a: Any
    key_b: Any
    a: Result
    b: Result
    runs_a: list[Result]
    runs_b: list[Result]

    @property
    def loose(self) -> bool:
        """A pair of different settings (_pairs' LOOSE fields), not a baseline and its candidate."""
        return self.key_a != self.key_b


def matched(a: Path, b: Path, strict: bool = False) -> list[Cell]:
    """The cells A and B share (equal, or paired by _pairs), per GPU count; files that are not results are skipped
    with a warning unless ``strict``; none shared is one clear error."""
    chosen_a, repeats_a = table_cells(load_results([a], None if strict else []))
    chosen_b, repeats_b = table_cells(load_results([b], None if strict else []))
    cells = []
    for key_a, key_b in _pairs(chosen_a, chosen_b):
        for n in sorted(set(chosen_a[key_a]) & set(chosen_b[key_b])):
            ra, rb = chosen_a[key_a][n], chosen_b[key_b][n]
            label = f"{key_b.label} {key_b.setting_text()} n={n}"
            if key_a != key_b:
                label += f" (A: {differences(key_a, key_b)})"
            cells.append(Cell(label, key_a, key_b, ra, rb, [ra, *repeats_a[(key_a, n)]], [rb, *repeats_b[(key_b, n)]]))
    if not cells:
        raise BenchError(f"{a} and {b} share no cell (mode, model, precision, batch, image size, n) to compare")
    return cells


def compare(a: Path, b: Path, strict: bool = False) -> list[Change]:
    """Cell by cell, metric by metric (compare_cells over matched)."""
    return compare_cells(matched(a, b, strict))


def compare_cells(cells: list[Cell]) -> list[Change]:
    rows = []
    for c in cells:
        for name in COMPARED:
            metric = METRICS[name]
            va, vb = metric.value(c.a), metric.value(c.b)
            if va is None or vb is None or va == 0:
                continue
            change = (vb - va) / va
            headline = name == "samples_per_sec_total"
            rows.append(Change(cell=c.label, metric=name, a=va, b=vb, change=change,
                               regression=-change if metric.higher_is_better else change, loose=c.loose))
            if headline:
                rows[-1] = dataclasses.replace(rows[-1], significant=significant(c.runs_a, c.runs_b),
                                               runs=(len(c.runs_a), len(c.runs_b)),
                                               input_cost=input_cost(c.key_a.source, c.key_b.source, va, vb))
    return rows


def load_rules(path: str) -> list[rules_mod.Rule]:
    """The rules of --rules: a file, or ``default`` for bench diagnose's own (rules.toml beside it)."""
    return rules_mod.load(None if path == "default" else path)


@dataclass(frozen=True)
class Verdict:
    """--rules: every finding (each names its cell), Accept per node of B's runs, the error count, and the rules
    no cell had a figure for."""
    findings: list[Finding]
    accept: list[NodeAccept]
    errors: int
    unused: list[str]


def apply_rules(rules: list[rules_mod.Rule], cells: list[Cell]) -> Verdict:
    """Each rule over every shared cell: B's figures (bench.commands.diagnose.rules.result_figures: the job's
    throughput, each rank's attribution and input figures) held against A's same cell (``against = "baseline"``),
    against B's other ranks (``"peers"``) or the rule's own value; then SuperBench's Accept per node of B's runs.
    Rules no cell has a figure for are named (a pair's figures come from bench diagnose, not from a training run)."""
    found, used = [], set()
    for c in cells:
        figures, baseline = rules_mod.result_figures(c.b), rules_mod.result_figures(c.a)
        used |= {r.name for r in rules if any(f.get(r.figure) is not None for f in figures.get(r.kind, {}).values())}
        for f in rules_mod.evaluate(rules, figures, baseline):
            f.cell = c.label  # a field of this use's own (a finding keeps extra fields)
            found.append(f)
    nodes = sorted({rank.host for c in cells for rank in c.b.environment.ranks})
    return Verdict(found, rules_mod.accept(nodes, found), sum(f.severity == "error" for f in found),
                   [r.name for r in rules if r.name not in used])


def print_verdict(console: Any, verdict: Verdict, path: str) -> None:
    from rich.table import Table

    if verdict.findings:
        table = Table("severity", "rule", "cell", "where", "figure", "expected", title=f"rules ({path}): findings")
        for f in verdict.findings:
            name, _, text = f.rule.partition(": ")
            table.add_row(f.severity, name, f.cell, f.where, f"{f.figure:.4g}", f"{f.expected:.4g} ({text})")
        console.print(never_cut(table, "rule", "where"))
    else:
        print(f"rules ({path}): no findings")
    nodes = Table("node", "accept", "errors", "warnings", title="accept (B's nodes)")
    for row in accept_rows(verdict.accept):
        nodes.add_row(*row)
    console.print(never_cut(nodes, "node"))
    job = sorted({f.rule.split(":")[0] for f in verdict.findings if f.severity == "error" and f.kind == "job"})
    if job:
        print(f"the job as a whole failed: {', '.join(job)} (a job's finding names no node)")
    if verdict.unused:
        print(f"rules with no figure in these results (not applied): {', '.join(verdict.unused)}")


# The cell fields a pair may differ in when each side has just one cell for the rest: the input (a --data run
# against a synthetic one), or the profile (paper against --tuned: the batch, the memory format, the compiler and
# optimizer settings).
LOOSE = (("source",), ("batch_size", "channels_last", "tuning"))


def _pairs(a: dict, b: dict) -> list[tuple[Any, Any]]:
    """The cells of A and B compared with each other: equal cells; then, among the others, a cell of A and one of
    B that differ only in the input or only in the profile's fields (LOOSE), where each side has just that one."""
    pairs = [(k, k) for k in set(a) & set(b)]
    taken_a, taken_b = set(set(a) & set(b)), set(set(a) & set(b))
    def by_setting(cells, taken, fields):
        out: dict[Any, list] = {}
        for key in cells:
            if key not in taken:
                out.setdefault(dataclasses.replace(key, **dict.fromkeys(fields)), []).append(key)
        return out

    for fields in LOOSE:
        sides_a, sides_b = by_setting(a, taken_a, fields), by_setting(b, taken_b, fields)
        for setting in set(sides_a) & set(sides_b):
            ka, kb = sides_a[setting], sides_b[setting]
            if len(ka) == len(kb) == 1:
                pairs.append((ka[0], kb[0]))
                taken_a.add(ka[0])
                taken_b.add(kb[0])
    return sorted(pairs, key=lambda p: (p[1].setting, p[1].label))


def differences(ka: Any, kb: Any) -> str:
    """What A's cell ran with where B's differs (the loosened fields), in words: '' for equal cells."""
    parts = []
    if ka.source != kb.source:
        parts.append(ka.source)
    if ka.batch_size != kb.batch_size:
        parts.append(f"batch {ka.batch_size}")
    if ka.channels_last != kb.channels_last:
        parts.append("channels-last" if ka.channels_last else "NCHW")
    if ka.tuning != kb.tuning:
        parts.append(ka.tuning or "eager, plain optimizer")
    return ", ".join(parts)


def input_cost(source_a: str, source_b: str, a: float, b: float) -> float | None:
    """The share of the synthetic run's throughput the input pipeline costs (module docstring); None unless one
    side is synthetic and the other read a dataset."""
    if source_a == "synthetic" and source_b != "synthetic":
        return 1 - b / a
    if source_b == "synthetic" and source_a != "synthetic":
        return 1 - a / b
    return None


def regressions(rows: list[Change], metric: str, max_regression_pct: float) -> list[Change]:
    """Cells where ``metric`` (a registry name; schema-1 names are accepted) got worse by more than the percent;
    a pair of different settings (Change.loose) is never one."""
    key = find(metric).key
    return [r for r in rows if r.metric == key and not r.loose and r.regression * 100 > max_regression_pct]
