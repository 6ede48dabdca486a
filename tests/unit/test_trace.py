"""--trace's arithmetic, table rows and checks (bench.measure.trace); real traced runs: tests/multiproc."""

import pytest

from bench.config import RunConfig
from bench.errors import BenchError
from bench.measure import trace
from bench.measure.raw import RankRecord
from bench.measure.trace import Trace
from tests import samples


def rank(r: int, traced: float, windows: list[float], timeline: str | None = None) -> RankRecord:
    files = [f"run.trace/rank{r}.pt.trace.json"]
    return samples.rank(r, host="n1", window_s=windows,
                        trace=trace.Traced(steps=3, traced_step_s=traced, untraced_step_s=sorted(windows)[1] / 4,
                                           files=files, timeline=timeline))


def test_the_cost_is_the_traced_step_over_the_timed_one():
    # windows of 4 steps; the job's windows are the slowest rank's: 0.44, 0.40, 0.48 -> median 0.44 -> 0.11 s a step
    ranks = [rank(0, 0.121, [0.40, 0.40, 0.48], "run.trace/horovod-timeline.json"), rank(1, 0.132, [0.44, 0.36, 0.40])]
    section = trace.build(ranks, 4, "run")
    assert section.folder == "run.trace" and section.steps == 3
    assert section.untraced_step_s == pytest.approx(0.11)
    assert section.traced_step_s == 0.132  # the slowest rank's
    assert section.cost == pytest.approx(0.132 / 0.11 - 1)
    assert [r.cost for r in section.per_rank] == pytest.approx([0.121 / 0.10 - 1, 0.132 / 0.10 - 1])
    assert section.horovod_timeline == "run.trace/horovod-timeline.json"
    rows = trace.table_rows(section)
    assert rows[0] == ("trace (after the windows)", "3 steps", "per rank, in run.trace/")
    assert rows[1][1] == "+20" and "132.0 ms traced, 110.0 ms in the windows" in rows[1][2]
    assert rows[2] == ("  Horovod timeline", "written", "run.trace/horovod-timeline.json")


def test_an_untraced_run_has_no_section_and_no_rows():
    ranks = [samples.rank(0, window_s=[0.4, 0.4, 0.4])]
    assert trace.build(ranks, 4, "run") is None
    assert trace.table_rows(None) == []


def test_the_result_schema_takes_the_section():
    ranks = [rank(0, 0.121, [0.40, 0.40, 0.48]), rank(1, 0.132, [0.44, 0.36, 0.40])]
    section = trace.build(ranks, 4, "run").model_dump(mode="json", exclude_unset=True)  # as the file holds it
    assert Trace.model_validate(section).per_rank[1].cost == pytest.approx(0.132 / 0.10 - 1)


def test_trace_is_refused_where_it_would_mislead():
    with pytest.raises(BenchError, match=r"--trace must be an integer >= 1"):
        RunConfig(mode="torch-ddp", trace=0)
    with pytest.raises(BenchError, match="ps strategy runs its steps in the worker processes"):
        RunConfig(mode="tf-native", strategy="ps", trace=2)
    assert RunConfig(mode="tf-native", strategy="mirrored", trace=2).trace == 2


def test_horovods_timeline_is_dynamic_only_for_a_traced_run_and_never_overrides_the_users():
    from bench.distributed.hvdist import set_knobs

    environ: dict[str, str] = {}
    set_knobs(RunConfig(mode="torch-horovod"), environ)
    assert "HOROVOD_TIMELINE" not in environ
    set_knobs(RunConfig(mode="torch-horovod", trace=2), environ)
    assert environ["HOROVOD_TIMELINE"] == "DYNAMIC" and trace.timeline_wanted(environ)
    users = {"HOROVOD_TIMELINE": "/shared/mine.json"}
    set_knobs(RunConfig(mode="torch-horovod", trace=2), users)
    assert users["HOROVOD_TIMELINE"] == "/shared/mine.json" and not trace.timeline_wanted(users)


def test_horovods_objects_are_gathered_under_one_name_whatever_their_type():
    """Horovod names allgather_object's collective after the object's type unless told: a run id on rank 0 and None
    on the others were two collectives that never met (the traced torch-horovod run hung there)."""
    from bench.distributed.hvdist import allgather_object

    names = []

    class FakeHorovod:
        def allgather_object(self, obj, name=None):
            names.append(name)
            return [obj]

    for obj in ("20261128T000000Z-torch-horovod-00000000", None, 1.5):
        allgather_object(FakeHorovod(), obj)
    assert len(set(names)) == 1 and names[0] is not None

