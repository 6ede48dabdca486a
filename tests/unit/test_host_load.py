"""bench.measure.host_load in process: the kernel's counters read from a /proc made in a folder, the figures
between two readings, one host's and several hosts' sections, and the warning's threshold."""

import os

import pytest
from pydantic import ValidationError

from bench.measure import host_load
from tests import samples

TICK = os.sysconf("SC_CLK_TCK")


def fake_proc(tmp_path, stat: str, processes: dict[int, tuple[str, int, int]]):
    """A /proc with ``stat`` as /proc/stat and, per pid, (name, ppid, ticks): utime, stime, cutime and cstime
    set to ticks, 2 x ticks, 3 x ticks and 4 x ticks (10 x ticks in all)."""
    (tmp_path / "stat").write_text(stat)
    for pid, (name, ppid, ticks) in processes.items():
        (tmp_path / str(pid)).mkdir()
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks * k) for k in (1, 2, 3, 4)] + ["20", "0", "1"]
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")
    (tmp_path / "self").mkdir()  # not a pid: skipped
    return tmp_path


STAT = ("cpu  100 10 50 900 7 3 2 5 40 0\ncpu0 50 5 25 450 3 1 1 2 20 0\ncpu1 50 5 25 450 4 2 1 3 20 0\n"
        "intr 1 2 3\nbtime 1700000000\n")


def test_the_host_counters_add_busy_fields_and_count_cpus(tmp_path):
    proc = fake_proc(tmp_path, STAT, {})
    # busy: user 100 + nice 10 + system 50; irq 3 + softirq 2 apart (the kernel's interrupt work, whoever's
    # traffic it was); idle, iowait and guest (inside user) left out
    assert host_load.cpu_counters(proc) == host_load.Counters(busy=160, irq=5, steal=5, cpus=2)


def test_unreadable_or_foreign_counters_are_none(tmp_path):
    assert host_load.cpu_counters(tmp_path) is None
    (tmp_path / "stat").write_text("intr 1 2\n")
    assert host_load.cpu_counters(tmp_path) is None


def test_a_process_tree_counts_every_descendant_once_and_no_other_process(tmp_path):
    proc = fake_proc(tmp_path, STAT, {
        10: ("python", 1, 1),            # the rank
        11: ("pt_data_worker", 10, 2),   # its loader worker
        12: ("fork server", 10, 3),      # a name with a space
        13: ("a) b (c", 12, 4),          # a name with parentheses, below the fork server
        20: ("python", 1, 100),          # another process: not the rank's
        21: ("child", 20, 100),
    })
    assert host_load.tree_ticks(10, proc) == 10 * (1 + 2 + 3 + 4)
    assert host_load.tree_ticks(12, proc) == 10 * (3 + 4)
    assert host_load.tree_ticks(99, proc) is None


def reading(t: float, run: int, busy: int | None = None, steal: int = 0, cpus: int = 2, irq: int = 0):
    return host_load.Reading(t=t, run=run, host=None if busy is None else host_load.Counters(busy=busy, irq=irq,
                                                                                            steal=steal, cpus=cpus))


def test_between_turns_ticks_into_cores_over_the_interval():
    got = host_load.between(reading(10.0, 0, 0, irq=TICK), reading(12.0, 2 * TICK, 3 * TICK, steal=TICK // 2,
                                                                    irq=2 * TICK))
    assert got.interval_s == 2.0
    assert got.run_cores == pytest.approx(1.0)
    assert got.host == host_load.HostCores(cpus=2, busy_cores=pytest.approx(1.5), irq_cores=pytest.approx(0.5),
                                           steal_cores=pytest.approx(0.25, abs=0.01))
    # a rank that is not its host's local rank 0 has no host counters
    assert host_load.between(reading(0.0, 0), reading(1.0, TICK)).host is None
    assert host_load.between(reading(1.0, 0), reading(1.0, 5)) is None  # no interval
    assert host_load.between(reading(0.0, None), reading(1.0, 5)) is None  # this process unreadable


def rank(host: str, run_cores: float, busy: float | None = None, serving: bool = False):
    cores = None if busy is None else host_load.HostCores(cpus=2, busy_cores=busy, irq_cores=0.4, steal_cores=0.0)
    return samples.rank(host=host, host_load=host_load.CpuRecord(interval_s=4.0, run_cores=run_cores, serving=serving,
                                                           host=cores))


def test_each_host_takes_its_own_ranks_cpu_from_its_busy_cores():
    load = host_load.section([rank("a", 0.9, busy=2.0), rank("a", 0.8), rank("b", 1.0, busy=1.1)])
    a, b = load.hosts
    assert (a.host, a.ranks, a.run_cores) == ("a", 2, pytest.approx(1.7))
    assert a.other_cores == pytest.approx(0.3)  # the interrupts' 0.4 in neither the run's nor the others'
    assert a.irq_cores == pytest.approx(0.4) and a.busy_cores == pytest.approx(2.0)
    assert b.other_cores == pytest.approx(0.1)
    assert load.other_cores_max == pytest.approx(0.3)
    assert host_load.warning(load) is None  # under half a core everywhere
    assert host_load.table_rows(load) == [("other processes' cores", "0.30", "of 2 on a over the windows (this "
                                           "run's: 1.70, interrupts': 0.40)")]


def test_a_run_busier_than_its_host_counters_has_zero_other_cores_not_a_negative_figure():
    # the run's ticks and the host's are read moments apart: the run may seem busier than the host
    load = host_load.section([rank("a", 1.05, busy=1.0)])
    assert load.hosts[0].other_cores == 0.0


def test_half_a_core_taken_warns_in_one_line_naming_the_busiest_host():
    load = host_load.section([rank("a", 1.0, busy=1.6), rank("b", 1.0, busy=2.0)])
    line = host_load.warning(load)
    assert line.startswith("warning: other processes kept 1.0 of b's 2 cores busy")
    assert "(and 1 more host(s))" in line and "\n" not in line
    assert host_load.warning(host_load.section([rank("a", 1.0, busy=1.49)])) is None


def test_serving_processes_leave_other_cores_unmeasured_with_the_reason():
    load = host_load.section([rank("a", 0.5, busy=2.0, serving=True)])
    assert load.hosts[0].other_cores is None and load.other_cores_max is None
    assert "ps" in load.other_cores_note
    assert host_load.table_rows(load) == [("other processes' cores", "n/a", load.other_cores_note)]
    assert host_load.warning(load) is None


def test_no_host_counters_or_no_cpu_record_give_no_section():
    assert host_load.section([rank("a", 1.0)]) is None
    assert host_load.section([samples.rank(host="a", host_load=None)]) is None
    assert host_load.warning(None) is None and host_load.table_rows(None) == []


def test_every_section_is_a_typed_host_load_and_a_malformed_host_is_refused():
    for load in (host_load.section([rank("a", 0.9, busy=2.0), rank("b", 1.0, busy=1.1)]),
                 host_load.section([rank("a", 0.5, busy=2.0, serving=True)])):
        written = load.model_dump(mode="json", exclude_unset=True)  # as the result file holds it
        assert [h.host for h in host_load.HostLoad.model_validate(written).hosts] == [h.host for h in load.hosts]
    good = host_load.section([rank("a", 0.9, busy=2.0)]).model_dump(mode="json", exclude_unset=True)
    for bad in ({"ranks": 0}, {"other_cores": -0.1}, {"cores": 1.0}):
        load = {**good, "hosts": [{**good["hosts"][0], **bad}]}
        with pytest.raises(ValidationError):
            host_load.HostLoad.model_validate(load)
    with pytest.raises(ValidationError):
        host_load.HostLoad.model_validate({**good, "hosts": []})
