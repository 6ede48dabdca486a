"""Tables never cut what users type: in a narrow terminal or a pipe each mode, cell and host of a table is whole
on one line (wherever the terminal is wider than those columns), and without never_cut the same table cuts
it (so the check can fail)."""

import io

import pytest
from rich.console import Console
from rich.table import Table

from bench.tables import never_cut

LONG = "tf-native:multiworker-transformer-small-np16"


def rendered(table, width: int = 60) -> str:
    out = io.StringIO()
    Console(file=out, width=width).print(table)
    return out.getvalue()


def whole(text: str, value: str) -> bool:
    return any(value in line for line in text.splitlines())


def a_table(keep: bool):
    table = Table("cell", "status", "img/s total", "seconds", "note")
    table.add_row(LONG, "failed", "", "12", "rank 1 exited with code 1, first of the ranks; stopped the others")
    return never_cut(table, "cell") if keep else table


@pytest.mark.parametrize("width", [50, 60, 100])
def test_an_identifier_column_stays_whole(width):
    assert whole(rendered(a_table(True), width), LONG)


def test_without_it_the_narrow_table_cuts_the_identifier():
    assert not whole(rendered(a_table(False), 50), LONG)


def test_the_verify_and_diagnose_tables_keep_modes_and_hosts_whole():
    from bench.commands.diagnose import render as diagnose_render
    from bench.commands.verify import render
    from bench.records.kinds import Verify
    from bench.records.schema import Diagnose
    from bench.records.store import Kind
    from tests import samples

    verify = Verify(**{**samples.record(Kind.VERIFY),
                       "config": {"model": "transformer-small", "steps": 3, "fp16_allreduce": False, "fault": None},
                       "modes": [{"mode": "tf-native:multiworker", "framework": "tf", "world_size": 2, "max_abs": 1e-8,
                                  "max_rel": 1e-6, "of_update": 1e-6, "tolerance": 1e-4, "status": "PASS"}]})
    assert whole(rendered(render(verify), 50), "tf-native:multiworker")
    host = "gpu-node-0042.cluster.example.org"
    record = Diagnose(**{**samples.record(Kind.DIAGNOSE), "findings": [
        {"severity": "error", "kind": "device", "where": host, "figure": 8.2, "expected": 17.8,
         "rule": "device-slower-than-peers", "name": "samples_per_sec", "against": "peers",
         "why": "compute 0.878 s against 0.359 s"}]})
    out = io.StringIO()
    table = Table("severity", "kind", "where", "figure", "expected", "rule", "why")
    for row in diagnose_render.finding_rows(record.findings):
        table.add_row(*row)
    Console(file=out, width=80).print(never_cut(table, "where"))  # 80: rich's width in a pipe
    assert whole(out.getvalue(), host)
