"""bench diagnose's record, for people: a markdown report (diagnose.md) and the terminal table."""

from __future__ import annotations

from typing import Any

from bench.records.schema import Diagnose, Finding, NodeAccept
from bench.tables import never_cut

UNITS = {"samples_per_sec": "samples/s", "busbw_GBps": "GB/s", "latency_us": "us", "compute_s": "s"}


def _num(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, list):
        return ", ".join(map(str, x)) or "none"
    return "-" if x is None else str(x)


def figure_rows(record: Diagnose) -> list[tuple[str, str, str, str]]:
    """(kind, member, figures, verdict) for every member measured, and every member a finding names."""
    flagged: dict[tuple[str, str], list[str]] = {}
    for f in record.findings:
        flagged.setdefault((f.kind, f.where), []).append(f.severity.upper())
    rows = []
    for kind, members in record.figures.items():
        for member, figs in members.items():
            text = "  ".join(f"{k} {_num(v)}" for k, v in figs.items() if k in UNITS or k == "exposed_s")
            rows.append((kind, member, text, " ".join(sorted(set(flagged.get((kind, member), [])))) or "ok"))
    measured = {(k, m) for k, ms in record.figures.items() for m in ms}
    for (kind, member), verdicts in flagged.items():
        if (kind, member) not in measured:
            rows.append((kind, member, "-", " ".join(sorted(set(verdicts)))))
    return rows


def finding_rows(findings: list[Finding]) -> list[tuple[str, ...]]:
    """(severity, kind, where, figure, expected, rule, why) per finding: diagnose's table, and bench history
    check's."""
    return [(f.severity, f.kind, f.where, _num(f.figure), _num(f.expected), f.rule, f.why or "") for f in findings]


def accept_rows(accept: list[NodeAccept] | None) -> list[tuple[str, str, str, str]]:
    """(node, Accept, errors, warnings) per node: SuperBench's Accept column (none in records before it)."""
    return [(a.node, "yes" if a.accepted else "NO", ", ".join(a.errors) or "-", ", ".join(a.warnings) or "-")
            for a in accept or []]


def headline(record: Diagnose) -> str:
    errors = sum(f.severity == "error" for f in record.findings)
    warnings = len(record.findings) - errors
    phases = ", ".join(f"{name} {p.seconds:.0f} s" for name, p in record.phases.items())
    verdict = "PASS" if record.passed else "FAIL"
    return (f"diagnose {verdict}: {len(record.nodes)} nodes ({', '.join(record.nodes)}), {errors} errors, "
            f"{warnings} warnings; {phases}; baseline {record.baseline or 'none'}")


def markdown(record: Diagnose) -> str:
    lines = [f"# bench diagnose {record.run_id}", "", headline(record), "", "## Findings", ""]
    if record.findings:
        lines += ["| severity | kind | where | figure | expected | rule | why |", "|---|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(r) + " |" for r in finding_rows(record.findings)]
    else:
        lines.append("None: every check passed.")
    if record.accept:
        lines += ["", "## Accept", "", "A node is accepted when no error finding names it, its devices or its ranks "
                  "(a pair's finding names neither end; the node in every flagged pair is named).", "",
                  "| node | accept | errors | warnings |", "|---|---|---|---|"]
        lines += ["| " + " | ".join(r) + " |" for r in accept_rows(record.accept)]
    lines += ["", "## Figures", "", "| kind | member | figures | verdict |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in figure_rows(record)]
    straggler = getattr(record.phases.get("job"), "straggler", None)  # the job's attribution, as the result has it
    if straggler:
        lines += ["", f"The job's attribution names rank {straggler['rank']} ({straggler['host']}, "
                      f"{straggler['device']}) as its straggler: compute x{straggler['slowdown']:.2f} the others'."]
    lines += ["", "## Rules", "", *[f"- {r}" for r in record.rules], ""]
    return "\n".join(lines)


def terminal(record: Diagnose) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table("kind", "member", "figures", "verdict", title="bench diagnose: figures")
    for row in figure_rows(record):
        table.add_row(*row)
    console.print(never_cut(table, "member"))
    if record.findings:
        findings = Table("severity", "kind", "where", "figure", "expected", "rule", "why", title="findings")
        for row in finding_rows(record.findings):
            findings.add_row(*row)
        console.print(never_cut(findings, "where"))
    if record.accept:
        nodes = Table("node", "accept", "errors", "warnings", title="accept")
        for row in accept_rows(record.accept):
            nodes.add_row(*row)
        console.print(never_cut(nodes, "node"))
    console.print(headline(record))
