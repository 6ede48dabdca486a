import csv
import json

import pytest

from bench import SCHEMA_VERSION
from bench.config import RunConfig
from bench.errors import BenchError
from bench.launching.detect import LaunchInfo
from bench.records.header import new_run_id
from bench.records.results import (
    CSV_FIELDS,
    CSV_NAME,
    build_result,
    check_output_dir,
    load_result,
    write_result,
)

# build_result counts the model's training FLOPs with PyTorch: every test here has torch in the process.
pytestmark = pytest.mark.framework


def gathered(checksums=("a", "a")):
    ranks = []
    for r, c in enumerate(checksums):
        ranks.append({"rank": r, "local_rank": r, "host": "h", "device": "cpu", "setup_s": 1.0,
                      "first_step_s": 0.5, "init_s": 2.0 + r, "train_s": 4.0, "warmup_step_s": [0.2],
                      "window_s": [1.0, 2.0, 1.0], "checksum": c, "param_sum_initial": 1.0,
                      "param_sum_final": 2.0, "replicas": 1, "sync_report": None})
    return {"ranks": ranks, "environment": {"hostname": "h"}, "t_start": 0.0}


def make(checksums=("a", "a")):
    cfg = RunConfig(mode="torch-ddp", batch_size=4, steps_per_window=5, windows=3).resolve("cpu", len(checksums))
    return build_result(cfg, LaunchInfo("self", world_size=len(checksums)), gathered(checksums),
                        new_run_id("torch-ddp"))


def test_result_figures_follow_the_formulas():
    r = make()
    # 2 ranks x 4 images x 5 steps = 40 images per window; slowest rank per window: 1, 2, 1 s
    assert r["summary"]["windows_total_samples_per_sec"] == [40.0, 20.0, 40.0]
    assert r["summary"]["samples_per_sec_total"] == pytest.approx(100 / 3)
    assert r["summary"]["samples_per_sec_per_gpu"] == pytest.approx(50 / 3)
    assert r["timing"]["init_s"] == 3.0  # slowest rank
    # images after init: 2 ranks x 4 x (1 warmup + 3 windows x 5 steps) = 128 over 4 s of train time
    assert r["summary"]["samples_per_sec_wall_train"] == pytest.approx(32.0)
    assert r["summary"]["samples_per_sec_wall_total"] == pytest.approx(128 / 7)
    assert r["sync"]["ranks_in_sync"] and r["sync"]["params_changed"]
    assert r["schema_version"] == SCHEMA_VERSION


def test_out_of_sync_ranks_are_flagged():
    assert not make(("a", "b"))["sync"]["ranks_in_sync"]


def test_write_round_trip_and_never_overwrite(tmp_path):
    out = check_output_dir(tmp_path / "out")
    r = make()
    path = write_result(out, r)
    assert load_result(path) == json.loads(json.dumps(r))
    with pytest.raises(BenchError, match="already exists"):
        write_result(out, r)
    assert load_result(path)["run_id"] == r["run_id"]
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
    with pytest.raises(BenchError, match="is not an hvdbench result"):
        load_result(p)
    p.write_text("[1]")
    with pytest.raises(BenchError, match="not a JSON object"):
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
    assert load_result(path) == json.loads(json.dumps(result))
    with pytest.raises(BenchError, match="already exists; not overwritten"):
        write_result(out, result)
    assert sorted(p.name for p in out.iterdir()) == sorted([path.name, CSV_NAME])  # no temporary left


def test_write_without_rename_either(tmp_path, monkeypatch):
    import os

    no_hard_links(monkeypatch)
    monkeypatch.setattr(os, "replace", lambda *_: (_ for _ in ()).throw(OSError(1, "refused")))
    from bench.records.results import write_json_new

    path = write_json_new(tmp_path / "r.json", {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1} and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_result_the_folder_cannot_take_goes_to_the_fallback(tmp_path, monkeypatch):
    import errno
    import os

    from bench.records.results import write_json_new

    out, spare = tmp_path / "out", tmp_path / "spare"
    out.mkdir()
    real_mkstemp = __import__("tempfile").mkstemp

    def full(*args, dir=None, **kwargs):
        if str(dir) == str(out):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr("tempfile.mkstemp", full)
    monkeypatch.setenv("HVDBENCH_FALLBACK_DIR", str(spare))
    with pytest.raises(BenchError, match=f"No space left on device.*saved to {spare}/r.json instead"):
        write_json_new(out / "r.json", {"a": 1})
    assert json.loads((spare / "r.json").read_text()) == {"a": 1}
    assert not os.listdir(out)
