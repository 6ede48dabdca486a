"""--exit-codes nagios on the commands that judge a node (bench preflight, bench diagnose): 0 ok, 1 a warning, 2 an
error, 3 could not judge; a stop signal keeps its own status."""

import pytest

from bench.commands.diagnose import DiagnoseConfig
from bench.commands.preflight import PreflightConfig
from bench.errors import BenchError, Stopped, judged, nagios


def test_the_status_is_the_worst_finding():
    assert (nagios(0, 0), nagios(0, 3), nagios(1, 0), nagios(2, 5)) == (0, 1, 2, 2)


def test_a_command_that_could_not_judge_is_unknown_in_one_line(capsys):
    def fails() -> int:
        raise BenchError("no nodes to diagnose")

    assert judged(fails, "nagios") == 3
    assert capsys.readouterr().err.strip() == "error: no nodes to diagnose"
    with pytest.raises(BenchError):  # bench's own statuses: the CLI prints it and exits 1
        judged(fails, "bench")


def test_a_stop_keeps_the_signals_status():
    def stopped() -> int:
        raise Stopped(15)

    with pytest.raises(Stopped):
        judged(stopped, "nagios")


def test_an_unknown_scheme_is_one_line():
    with pytest.raises(BenchError, match="--exit-codes takes bench or nagios"):
        PreflightConfig(exit_codes="icinga")
    with pytest.raises(BenchError, match="--exit-codes takes bench or nagios"):
        DiagnoseConfig(nodes=("a", "b"), exit_codes="icinga").check()
