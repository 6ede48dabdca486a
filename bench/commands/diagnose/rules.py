"""bench diagnose's verdicts: rules (data, bench/commands/diagnose/rules.toml) over the phases' figures.

A *member* is what a figure belongs to: a device (``node1`` or ``node1/1``), a pair of nodes
(``node1+node2``), a rank of the full job (``rank 2``), or the job. ``figures`` maps kind -> member -> figure
name -> value. A rule compares one figure of every member of its kind with an expected value:

    peers:     expected = median of the same figure over the *other* members of that kind in this run
               (no verdict with fewer than 2 others: a median of one is that one)
    baseline:  expected = the same member's figure in the baseline, or, for a member the baseline lacks,
               the median of that kind there (a baseline merged from several: each figure's median over them);
               with ``median_floor``, the more lenient of the member's figure and that median (a pair's lucky
               latency in the baseline sets no bar a healthy run cannot meet)
    value:     expected = the rule's own ``value`` (an absolute bound: a fleet's floor, a latency ceiling)

    below:  a finding when figure < expected x (1 - tolerance)      (value: figure < value)
    above:  a finding when figure > expected x (1 + tolerance)      (value: figure > value)

SuperBench's kinds of rule, here: its "value" is ``against = "value"``; its "variance" (the deviation from a
baseline) is ``against = "baseline"`` (or ``"peers"``, the baseline this run itself gives); its "failure check" is
the derived ``did-not-run``; its "multi-rules" (several rules over one member) is :func:`accept`: a node is accepted
when no error names it, whichever rules those were.

Two findings are derived, not ruled: a member whose phase did not run to the end (``did-not-run``), and, when
two or more pairs are flagged and one node is in every flagged pair, that node (``common-member-of-pairs``):
a link fault shows on every pair that crosses it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import BenchError
from bench.records.schema import Finding, NodeAccept, Result

DEFAULT_RULES = Path(__file__).with_name("rules.toml")
KINDS = ("device", "pair", "rank", "job")
AGAINST = ("peers", "baseline", "value")
REQUIRED = ("name", "kind", "figure", "against", "direction", "severity")  # and tolerance, or value (against value)
FIGURES = {"device": ("samples_per_sec", "loader_rate", "data_wait_share"), "pair": ("busbw_GBps", "latency_us"),
           "rank": ("compute_s", "exposed_s", "step_s", "loader_rate", "data_wait_share"),
           "job": ("samples_per_sec",)}


@dataclass(frozen=True)
class Rule:
    name: str
    kind: str
    figure: str
    against: str
    direction: str
    severity: str
    tolerance: float | None = None  # peers and baseline: the share the figure may fall short of (or exceed) them
    value: float | None = None  # against = "value": the bound itself
    median_floor: bool = False  # baseline: never stricter than the baseline's median of the kind (module docstring)

    def flagged(self, value: float, expected: float) -> bool:
        margin = self.tolerance or 0.0
        if self.direction == "below":
            return value < expected * (1 - margin)
        return value > expected * (1 + margin)

    def text(self) -> str:
        sign = "<" if self.direction == "below" else ">"
        if self.against == "value":
            return f"{self.name}: {self.figure} {sign} {self.value:g}"
        factor = 1 - self.tolerance if self.direction == "below" else 1 + self.tolerance
        return f"{self.name}: {self.figure} {sign} {factor:g} x {self.against}"


def _toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise BenchError("reading diagnose rules needs Python 3.11 or the tomli package") from None
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise BenchError(f"cannot read rules {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise BenchError(f"rules {path}: not TOML ({exc})") from None


def load(path: str | Path | None = None) -> list[Rule]:
    """The rules in ``path`` (default: bench/commands/diagnose/rules.toml), each checked."""
    path = Path(path) if path else DEFAULT_RULES
    data = _toml(path)
    rules = []
    for i, raw in enumerate(data.get("rule", []), 1):
        where = f"rules {path}, rule {i} ({raw.get('name', 'unnamed')})"
        bound = "value" if raw.get("against") == "value" else "tolerance"  # what the rule holds the figure by
        missing = [k for k in (*REQUIRED, bound) if k not in raw]
        extra = sorted(set(raw) - set(REQUIRED) - {bound} - ({"median_floor"} if raw.get("against") == "baseline"
                                                              else set()))
        if missing or extra:
            raise BenchError(f"{where}: {'missing ' + ', '.join(missing) if missing else ''}"
                             f"{'; ' if missing and extra else ''}{'unknown ' + ', '.join(extra) if extra else ''}")
        if raw["kind"] not in KINDS:
            raise BenchError(f"{where}: kind must be one of {', '.join(KINDS)}")
        if raw["figure"] not in FIGURES[raw["kind"]]:
            raise BenchError(f"{where}: a {raw['kind']} has the figures {', '.join(FIGURES[raw['kind']])}")
        for key, allowed in (("against", AGAINST), ("direction", ("below", "above")),
                             ("severity", ("error", "warning"))):
            if raw[key] not in allowed:
                raise BenchError(f"{where}: {key} must be {' or '.join(allowed)}")
        if not isinstance(raw.get("median_floor", False), bool):
            raise BenchError(f"{where}: median_floor must be true or false")
        number = raw[bound]
        if not isinstance(number, (int, float)) or isinstance(number, bool):
            raise BenchError(f"{where}: {bound} must be a number")
        if bound == "tolerance" and not 0 < number < (1 if raw["direction"] == "below" else 100):
            raise BenchError(f"{where}: tolerance must be a number above 0 (below 1 for 'below')")
        rules.append(Rule(**{**raw, bound: float(number)}))
    if not rules:
        raise BenchError(f"rules {path}: no [[rule]] tables")
    return rules


def rank_member(rank: int, host: str) -> str:
    return f"rank {rank} ({host})"


def result_figures(result: Result) -> dict[str, dict[str, dict[str, Any]]]:
    """The job's and each rank's figures in one training result (kind -> member -> figure name -> value): the job's
    throughput; each rank's compute, exposed exchange and step time (seconds per step) where attribution measured
    them; each rank's input pipeline rate alone and share of the timed windows spent waiting for batches where the
    run read a dataset. bench diagnose's job phase and bench compare --rules read a result through this alone."""
    ranks: dict[str, dict[str, Any]] = {}
    attribution = result.attribution
    if attribution is not None and attribution.measured:
        for p in attribution.per_rank or []:
            ranks[rank_member(p.rank, p.host)] = {"compute_s": p.compute_s, "exposed_s": p.exposed_s,
                                                  "step_s": p.step_s}
    section = result.input
    if section is not None and section.source == "dataset":
        for i in section.per_rank:
            if i.rank is not None and i.host is not None:  # tf-native ps's workers have no rank: no member of the job
                ranks.setdefault(rank_member(i.rank, i.host), {}).update(
                    loader_rate=i.loader_rate, data_wait_share=i.input_share)
    return {"job": {"job": {"samples_per_sec": result.summary.samples_per_sec_total}}, "rank": ranks}


def finding(kind: str, where: str, figure: Any, expected: Any, rule: str, severity: str, name: str,
            against: str | None, **more: Any) -> Finding:
    """One finding; every kind has the same fields: ``name`` is the figure or the derived check, ``against`` the
    peers, the baseline or None (a derived check holds nothing against)."""
    return Finding(kind=kind, where=where, figure=figure, expected=expected, rule=rule, severity=severity, name=name,
                   against=against, **more)


def evaluate(rules: list[Rule], figures: dict[str, dict[str, dict[str, float]]],
             baseline: dict[str, dict[str, dict[str, float]]] | None) -> list[Finding]:
    """Every rule over every member that has its figure; baseline rules only with a baseline."""
    found = []
    for rule in rules:
        members = {m: f[rule.figure] for m, f in figures.get(rule.kind, {}).items()
                   if f.get(rule.figure) is not None}
        for member, value in members.items():
            if rule.against == "value":
                expected = rule.value
            elif rule.against == "peers":
                others = [v for m, v in members.items() if m != member]
                if len(others) < 2:
                    continue
                expected = statistics.median(others)
            else:
                if baseline is None:
                    continue
                known = {m: f[rule.figure] for m, f in baseline.get(rule.kind, {}).items()
                         if f.get(rule.figure) is not None}
                if not known:
                    continue
                typical = statistics.median(known.values())
                expected = known.get(member, typical)
                if rule.median_floor:
                    expected = min(expected, typical) if rule.direction == "below" else max(expected, typical)
            if rule.flagged(value, expected):
                found.append(finding(rule.kind, member, value, expected, rule.text(), rule.severity,
                                     rule.figure, rule.against))
    return found


def common_member(found: list[Finding]) -> list[Finding]:
    """The node in every flagged pair, when two pairs or more are flagged and exactly one node is in all."""
    pairs = {f.where for f in found if f.kind == "pair" and f.severity == "error"}
    if len(pairs) < 2:
        return []
    nodes = [set(p.split("+")) for p in pairs]
    common = set.intersection(*nodes)
    if len(common) != 1:
        return []
    (node,) = common
    return [finding("node", node, len(pairs), f"{len(pairs)} flagged pairs", "common-member-of-pairs: the one node "
                    "in every flagged pair (its link, not the pairs, is slow)", "error", "common-member-of-pairs",
                    None, pairs=sorted(pairs))]


def node_of(finding_: Finding) -> str | None:
    """The node a finding holds against: a device's (``node1/0``: node1), a rank's host (``rank 2 (node1)``), a node
    named by its pairs; None for a pair (either end may be at fault) and for the job."""
    kind, where = finding_.kind, finding_.where
    if kind == "device":
        return where.split("/")[0]
    if kind == "rank":
        return where[where.find("(") + 1:-1] if where.endswith(")") else None
    return where if kind == "node" else None


def accept(nodes: list[str], found: list[Finding]) -> list[NodeAccept]:
    """Per node, SuperBench's Accept: accepted when no error finding names it (its devices, its ranks, the node
    itself), with the rules that rejected it; warnings are listed and never reject."""
    rows = []
    for node in nodes:
        mine = [f for f in found if node_of(f) == node]
        errors = sorted({f.rule.split(":")[0] for f in mine if f.severity == "error"})
        warnings = sorted({f.rule.split(":")[0] for f in mine if f.severity != "error"})
        rows.append(NodeAccept(node=node, accepted=not errors, errors=errors, warnings=warnings))
    return rows
