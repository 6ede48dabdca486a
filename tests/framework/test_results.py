import csv
import dataclasses
import json

import pytest

from bench import SCHEMA_VERSION
from bench.config import RunConfig
from bench.errors import BenchError
from bench.launching.detect import LaunchInfo
from bench.measure import attribution, telemetry
from bench.measure.graphs import compile_warning
from bench.measure.raw import Gathered
from bench.records.header import new_run_id
from bench.records.results import (
    CSV_FIELDS,
    CSV_LOCK_NAME,
    CSV_NAME,
    build_result,
    check_output_dir,
    load_result,
    write_result,
)
from tests import samples

# build_result counts the model's training FLOPs with PyTorch: every test here has torch in the process.


def gathered(checksums=("a", "a")) -> Gathered:
    ranks = [samples.rank(r, local_rank=r, host="h", device="cpu", setup_s=1.0, first_step_s=0.5, init_s=2.0 + r,
                          train_s=4.0, warmup_step_s=[0.2], window_s=[1.0, 2.0, 1.0], checksum=c)
             for r, c in enumerate(checksums)]
    return Gathered(ranks=ranks, environment={"hostname": "h"}, t_start=0.0)


def make(checksums=("a", "a")):
    cfg = RunConfig(mode="torch-ddp", batch_size=4, steps_per_window=5, windows=3).resolve("cpu", len(checksums))
    return build_result(cfg, LaunchInfo("self", world_size=len(checksums)), gathered(checksums),
                        new_run_id("torch-ddp"))


def test_result_figures_follow_the_formulas():
    r = make()
    # 2 ranks x 4 images x 5 steps = 40 images per window; slowest rank per window: 1, 2, 1 s
    assert r.summary.windows_total_samples_per_sec == [40.0, 20.0, 40.0]
    # the headline: 3 windows x 40 images over the slowest rank's 4 s (not the mean of the rates, 33.3)
    assert r.summary.samples_per_sec_total == pytest.approx(30.0)
    assert r.summary.samples_per_sec_per_gpu == pytest.approx(15.0)
    assert r.timing.init_s == 3.0  # slowest rank
    # images after init: 2 ranks x 4 x (1 warmup + 3 windows x 5 steps) = 128 over 4 s of train time
    assert r.summary.samples_per_sec_wall_train == pytest.approx(32.0)
    assert r.summary.samples_per_sec_wall_total == pytest.approx(128 / 7)
    assert r.sync.ranks_in_sync and r.sync.params_changed
    assert r.schema_version == SCHEMA_VERSION


def test_the_wall_figures_count_the_samples_of_data_s_settling_steps_their_time_holds():
    """--data's untimed settling steps (a queue brought to full or empty before the windows) run inside train_s's
    clock: their samples count in the wall-clock figures as their time does."""
    g = gathered()
    for r in g.ranks:
        r.parts["input"] = samples.fed([0.0] * 15, settle_steps=6)
    cfg = RunConfig(mode="torch-ddp", batch_size=4, steps_per_window=5, windows=3).resolve("cpu", 2)
    r = build_result(cfg, LaunchInfo("self", world_size=2), g, "r1")
    # 2 ranks x 4 images x (1 warmup + 6 settling + 3 windows x 5 steps) = 176 over 4 s of train time
    assert r.summary.samples_per_sec_wall_train == pytest.approx(44.0)
    assert r.summary.samples_per_sec_wall_total == pytest.approx(176 / 7)
    assert r.summary.samples_per_sec_total == pytest.approx(30.0)  # the headline counts the windows alone


def test_out_of_sync_ranks_are_flagged():
    assert not make(("a", "b")).sync.ranks_in_sync


def test_a_result_that_does_not_match_its_model_keeps_the_raw_samples(tmp_path, monkeypatch):
    """The builder constructs the model: a figure of the wrong shape is one line naming the field, and every rank's
    raw samples are kept in the fallback folder (a finished measurement is never lost)."""
    from bench.errors import ResultNotWhole

    monkeypatch.setenv("HVDBENCH_FALLBACK_DIR", str(tmp_path / "spare"))
    g = gathered()
    g.ranks[1].device = None  # no device label
    cfg = RunConfig(mode="torch-ddp", batch_size=4, steps_per_window=5, windows=3).resolve("cpu", 2)
    with pytest.raises(ResultNotWhole, match=r"does not match its schema \(device: Input should be a valid string.*; "
                                             r"its raw samples are saved to .*spare/r1-raw.json instead"):
        build_result(cfg, LaunchInfo("self", world_size=2), g, "r1")
    assert json.loads((tmp_path / "spare" / "r1-raw.json").read_text())["ranks"][0]["window_s"] == [1.0, 2.0, 1.0]


def test_write_round_trip_and_never_overwrite(tmp_path):
    out = check_output_dir(tmp_path / "out")
    r = make()
    path = write_result(out, r)
    assert json.loads(path.read_text()) == r.model_dump(mode="json", by_alias=True, exclude_unset=True)
    assert load_result(path).model_dump() == r.model_dump() and load_result(path).file == str(path)
    with pytest.raises(BenchError, match="already exists"):
        write_result(out, r)
    assert load_result(path).run_id == r.run_id
    write_result(out, make())
    rows = list(csv.DictReader(open(out / CSV_NAME)))
    assert len(rows) == 2 and list(rows[0]) == CSV_FIELDS
    assert not list(out.glob(".tmp-*"))


def test_unwritable_output_and_foreign_csv(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(BenchError, match="not writable"):
        check_output_dir(blocker / "sub")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / CSV_NAME).write_text("a,b\n1,2\n")
    with pytest.raises(BenchError, match="column layout"):
        check_output_dir(tmp_path / "old")


def test_load_rejects_foreign_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"hello": 1}')
    with pytest.raises(BenchError, match="is not a record of hvdbench"):
        load_result(p)
    p.write_text("[1]")
    with pytest.raises(BenchError, match="is not a record of hvdbench"):
        load_result(p)


def no_hard_links(monkeypatch):
    """As on filesystems without hard links (vfat, some FUSE and network mounts): link() is refused."""
    import errno
    import os

    def refuse(*_args, **_kwargs):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", refuse)


def test_write_without_hard_links_is_whole_and_never_overwrites(tmp_path, monkeypatch):
    no_hard_links(monkeypatch)
    out = check_output_dir(tmp_path / "out")  # the check itself uses the writer's way and passes
    result = make()
    path = write_result(out, result)
    assert load_result(path).model_dump() == result.model_dump()
    with pytest.raises(BenchError, match="already exists; not overwritten"):
        write_result(out, result)
    # no temporary left; the CSV's lock file stays (a lock, not a temporary)
    assert sorted(p.name for p in out.iterdir()) == sorted([path.name, CSV_NAME, CSV_LOCK_NAME])


def test_write_without_rename_either(tmp_path, monkeypatch):
    import os

    no_hard_links(monkeypatch)
    monkeypatch.setattr(os, "replace", lambda *_: (_ for _ in ()).throw(OSError(1, "refused")))
    from bench.records import store

    record = samples.record(store.Kind.PEAK)
    path = store.write(tmp_path / "r.json", record)
    assert json.loads(path.read_text()) == record and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_result_the_folder_cannot_take_goes_to_the_fallback(tmp_path, monkeypatch):
    import errno
    import os

    from bench.records import store

    out, spare = tmp_path / "out", tmp_path / "spare"
    out.mkdir()
    real_mkstemp = __import__("tempfile").mkstemp

    def full(*args, dir=None, **kwargs):
        if str(dir) == str(out):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr("tempfile.mkstemp", full)
    monkeypatch.setenv("HVDBENCH_FALLBACK_DIR", str(spare))
    record = samples.record(store.Kind.PEAK)
    with pytest.raises(BenchError, match=f"No space left on device.*saved to {spare}/r.json instead"):
        store.write(out / "r.json", record)
    assert json.loads((spare / "r.json").read_text()) == record
    assert not os.listdir(out)


def test_a_disk_that_refuses_the_telemetry_series_keeps_the_result(tmp_path, monkeypatch, capsys):
    """Finding 3: the record is written before the telemetry time series; a full or over-quota disk (ENOSPC,
    EDQUOT, EROFS) that refuses the series costs a warning, never the finished measurement (before: the
    series went first and only FileExistsError was caught, so the JSON was never written)."""
    import errno

    from bench import files

    out = check_output_dir(tmp_path / "out")
    result = make()
    result.telemetry.samples_csv = f"{result.run_id}-telemetry.csv"
    real = files.write_new

    def quota(path, text):
        if str(path).endswith("-telemetry.csv"):
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        return real(path, text)

    monkeypatch.setattr(files, "write_new", quota)
    sample = telemetry.GpuSample(0.0, "h", 0, *[None] * (len(telemetry.COLUMNS) - 3))
    path = write_result(out, result, samples=[sample])
    assert json.loads(path.read_text())["run_id"] == result.run_id
    assert "telemetry time series" in capsys.readouterr().err
    assert (out / CSV_NAME).exists()


def test_results_csv_is_locked_through_a_file_opened_for_writing(tmp_path, monkeypatch):
    """Finding 4: NFS (and Lustre without flock) emulates flock with fcntl locks, which need a file opened for
    writing: the lock is a POSIX lock on a sidecar file opened for writing, tried by check_output_dir before
    any training; a folder whose files cannot be locked is refused there in one line."""
    import errno
    import os

    from bench.records import results

    seen = []
    real_lockf = results.fcntl.lockf

    def lockf(fd, how):
        flags = results.fcntl.fcntl(fd, results.fcntl.F_GETFL)
        seen.append(flags & os.O_ACCMODE)  # as NFS would: a lock on a file not opened for writing fails
        if flags & os.O_ACCMODE == os.O_RDONLY:
            raise OSError(errno.EBADF, "Bad file descriptor")
        return real_lockf(fd, how)

    monkeypatch.setattr(results.fcntl, "lockf", lockf)
    monkeypatch.setattr(results.fcntl, "flock", lambda *a: (_ for _ in ()).throw(OSError(errno.ENOLCK, "no")))
    monkeypatch.chdir(tmp_path)
    out = check_output_dir("out")  # a relative --output, as users type it
    write_result(out, make())
    assert seen and all(m == os.O_WRONLY for m in seen)
    assert sorted(p.name for p in out.iterdir() if p.suffix != ".json") == sorted([CSV_NAME, CSV_LOCK_NAME])

    def no_locks(fd, how):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(results.fcntl, "lockf", no_locks)
    with pytest.raises(BenchError, match="cannot lock a file for results.csv.*No locks available"):
        check_output_dir(tmp_path / "nolocks")
    assert not list((tmp_path / "nolocks").iterdir())  # the probe is gone


def test_compile_time_is_reported_apart_and_a_compiled_run_is_its_own_cell():
    """--compile: compile_s = the first step beyond a compiled step (median warmup step), slowest rank; the graphs
    compiled inside the windows are kept; an eager run has neither, and is another cell than the compiled one."""
    from bench.records.collect import key_of

    g = gathered()
    for r, first, graphs in zip(g.ranks, (9.0, 12.0), (0, 2), strict=True):
        r.first_step_s, r.warmup_step_s = first, [0.2, 0.4, 0.3]
        r.parts["graphs"] = {"first_step": 3 + graphs, "warmup": graphs // 2, "windows": graphs}
    cfg = RunConfig(mode="torch-ddp", batch_size=4, steps_per_window=5, windows=3, compile="default")
    result = build_result(cfg.resolve("cpu", 2), LaunchInfo("self", world_size=2), g, new_run_id("torch-ddp"))
    assert result.timing.compile_s == pytest.approx(12.0 - 0.3)
    assert result.timing.graphs_compiled_in_windows == 2
    assert (result.timing.graphs_compiled_in_first_step, result.timing.graphs_compiled_in_warmup) == (3, 1)
    eager = make()
    assert eager.timing.compile_s is None and eager.timing.graphs_compiled_in_windows is None
    assert eager.timing.graphs_compiled_in_first_step is None and eager.timing.graphs_compiled_in_warmup is None
    assert key_of(result).setting != key_of(eager).setting
    assert "compiled (default)" in key_of(result).setting_text()
    # the run's warning says where graphs were compiled after the first step; none for a clean or an eager run
    assert compile_warning(result) == (
        "warning: graphs were compiled after the first step: 2 in the timed windows (the throughput includes it); "
        "1 in the warmup steps (compile_s is short by it). A shape or guard changed between steps (PyTorch: "
        "TORCH_LOGS=recompiles names it; docs/profiles.md)")
    for r in g.ranks:
        r.parts["graphs"].update(windows=0, warmup=0)
    clean = build_result(cfg.resolve("cpu", 2), LaunchInfo("self", world_size=2), g, new_run_id("torch-ddp"))
    assert compile_warning(clean) is None and compile_warning(eager) is None
    g.ranks[1].parts["attribution"] = attribution.StepsApart(steps=2, compute_step_s=[0.2, 0.2],
                                                             exchange_step_s=[0.1, 0.1], graphs_compiled=1)
    g.ranks[0].parts["attribution"] = dataclasses.replace(g.ranks[1].parts["attribution"], graphs_compiled=0)
    apart = build_result(cfg.resolve("cpu", 2), LaunchInfo("self", world_size=2), g, new_run_id("torch-ddp"))
    assert "1 in the attribution's timed steps" in compile_warning(apart)
