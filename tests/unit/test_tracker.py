"""bench.measure.tracker: the loop calls every wanted tracker at its points, in order, and each one's finished however
the run ends; a section the Result does not declare is kept by name and read back through its model."""

from typing import ClassVar

import pytest
from pydantic import BaseModel

from bench.config import RunConfig
from bench.launching.detect import LaunchInfo
from bench.measure import loop, tracker
from bench.measure.builtin_trackers import BUILTIN, trackers
from tests import samples

POINTS = ("started", "first_step_done", "before_windows", "windows_open", "before_window", "after_window",
          "after_windows", "after_checksum", "finished")


class Trainer:
    """One process, no framework: steps that do nothing, a checksum that never changes."""
    rank, world_size, replicas_per_process = 0, 1, 1

    def __init__(self, fail_at: str | None = None) -> None:
        self.fail_at = fail_at

    def setup(self) -> None: ...

    def step(self) -> None:
        if self.fail_at == "step":
            raise RuntimeError("the step failed")

    def sync(self) -> None: ...

    def allgather(self, obj):
        return [obj]

    def checksum(self) -> str:
        return "a"

    def fingerprint(self) -> float:
        if self.fail_at == "fingerprint":
            raise RuntimeError("the parameters could not be read")
        return 1.0

    def environment(self) -> dict:
        return {}

    def device_label(self) -> str:
        return "cpu (1 threads)"

    def sync_report(self) -> None:
        return None


class Seen(BaseModel):
    points: list[str]


class Recorder(tracker.Tracker):
    """Records every point it is called at."""
    name = "recorder"
    model = Seen
    calls: ClassVar[list[str]] = []

    def __getattribute__(self, point: str):
        if point in POINTS:
            return lambda: Recorder.calls.append(point)
        return super().__getattribute__(point)

    def part(self) -> list[str]:
        return list(Recorder.calls)

    @classmethod
    def section(cls, job: tracker.Ranks) -> Seen:
        return Seen(points=job.parts(cls.name)[0])


@pytest.fixture
def recorder():
    Recorder.calls.clear()
    tracker.register(Recorder)
    yield Recorder
    del tracker.TRACKERS[Recorder.name]


CFG = RunConfig(mode="torch-single", warmup_steps=1, steps_per_window=2, windows=3, telemetry=False).resolve("cpu", 1)


def test_every_point_in_order_and_the_part_is_gathered(recorder):
    gathered = loop.measure(Trainer(), CFG, LaunchInfo("self"), run_id="run-1")
    windows = ["before_window", "after_window"] * 3
    expected = ["started", "first_step_done", "before_windows", "windows_open", *windows, "after_windows",
                "after_checksum", "finished"]
    assert gathered.ranks[0].parts["recorder"] == expected and gathered.run_id == "run-1"
    assert len(gathered.ranks[0].window_s) == 3
    assert recorder.calls == expected  # finished once, though the loop's end and measure's finally both stop


@pytest.mark.parametrize("fail_at", ["fingerprint", "step"])
def test_a_run_that_fails_raises_its_own_error_and_every_tracker_is_finished(recorder, fail_at):
    """However the run ends, each tracker's finished runs (the NVML sampler's thread stops) and the run's own error
    is what the rank reports, not one of a tracker's that never started."""
    with pytest.raises(RuntimeError, match="failed|could not be read"):
        loop.measure(Trainer(fail_at), CFG, LaunchInfo("self"), run_id="run-1")
    assert recorder.calls[-1] == "finished" and recorder.calls.count("finished") == 1


def test_the_builtin_trackers_come_first_in_their_order_then_a_plugins():
    from tests.plugins import toy_tracker  # registers context_switches, as HVDBENCH_PLUGINS would

    try:
        names = [t.__module__ for t in trackers()]
        assert names[:len(BUILTIN)] == list(BUILTIN) and names[-1] == toy_tracker.__name__
    finally:
        del tracker.TRACKERS[toy_tracker.ContextSwitches.name]


def test_a_section_the_result_does_not_declare_is_kept_by_name_and_read_back(recorder):
    result = samples.result()
    fields = result.model_dump()
    recorder.place(fields, Seen(points=["started"]))
    assert fields["measurements"] == {"recorder": {"points": ["started"]}}
    kept = type(result).model_validate({**result.model_dump(), "measurements": fields["measurements"]})
    assert recorder.read(kept) == Seen(points=["started"])
    assert recorder.read(result) is None  # a result without it
