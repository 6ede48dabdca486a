"""Files written whole and readable by a team: modes follow the umask, a record never appears half-written,
a CSV row is added whole or not at all, and one unreadable file in a folder does not stop a report."""

import errno
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from bench import files
from bench.errors import BenchError
from tests.conftest import FIXTURES


@pytest.fixture(params=[0o022, 0o002, 0o077])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_and_replaced_files_follow_the_umask(tmp_path, umask):
    """mkstemp's 0600 would survive the link or rename: a teammate could not read a shared folder."""
    files.write_new(tmp_path / "record.json", "{}\n")
    files.replace(tmp_path / "table.csv", "a\n")
    files.replace(tmp_path / "table.csv", "a\nb\n")
    expected = 0o666 & ~umask
    assert mode(tmp_path / "record.json") == expected and mode(tmp_path / "table.csv") == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json", "table.csv"]  # no temporary left


def test_a_full_disk_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "results.csv"
    target.write_text("header\nrow 1\n")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        files.replace(target, "header\nrow 1\nrow 2\n")
    with pytest.raises(OSError, match="No space left"):
        files.write_new(tmp_path / "r.json", "{}")
    assert target.read_text() == "header\nrow 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]


def test_a_record_is_never_replaced(tmp_path):
    files.write_new(tmp_path / "r.json", "one")
    with pytest.raises(FileExistsError):
        files.write_new(tmp_path / "r.json", "two")
    assert (tmp_path / "r.json").read_text() == "one"


def broken_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "shared"
    shutil.copytree(FIXTURES / "sweep-a", folder)
    first = sorted(folder.glob("2*.json"))[0]
    (folder / "truncated.json").write_text(first.read_text()[:200])
    (folder / "foreign.json").write_text('{"name": "a teammate\'s notes"}')
    return folder


def test_report_skips_what_it_cannot_read_and_lists_it(tmp_path, capsys):
    from bench.commands.report import write_report

    folder = broken_folder(tmp_path)
    path = write_report([folder], tmp_path / "report")
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2 and all("skipped" in w for w in warnings), warnings
    text = path.read_text()
    assert "## Files not read" in text and "truncated.json is not readable JSON" in text
    assert "foreign.json is not an hvdbench result" in text
    assert "| torch-ddp |" in text  # the readable results are reported


def test_report_and_compare_strict_refuse_it(tmp_path, cli):
    folder = broken_folder(tmp_path)
    r = cli("report", str(folder), "--output", str(tmp_path / "report"), "--strict")
    assert r.returncode == 1 and "foreign.json is not an hvdbench result" in r.stderr  # the first, sorted
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "report" / "report.md").exists()
    r = cli("compare", str(folder), str(FIXTURES / "sweep-b"), "--strict")
    assert r.returncode == 1 and "foreign.json is not an hvdbench result" in r.stderr
    r = cli("compare", str(folder), str(FIXTURES / "sweep-b"))
    assert r.returncode == 0 and r.stderr.count("warning: skipped") == 2, r.stderr


def test_write_result_is_a_unit_when_the_csv_cannot_take_the_row(tmp_path, monkeypatch):
    """The JSON (the record) lands, the CSV stays exactly as it was, and the error says both."""
    from bench.records import results

    record = results.load_result(next((FIXTURES / "sweep-a").glob("2*.json")))
    out = tmp_path / "out"
    out.mkdir()
    (out / results.CSV_NAME).write_text(",".join(results.CSV_FIELDS) + "\r\nearlier,row\r\n")
    before = (out / results.CSV_NAME).read_bytes()
    real = files.replace

    def full(path, text):
        if path.name == results.CSV_NAME:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, text)

    monkeypatch.setattr(files, "replace", full)
    with pytest.raises(results.CsvNotUpdated) as caught:
        results.write_result(out, record)
    message = str(caught.value)
    assert f"the result is written to {out / (record.run_id + '.json')}" in message
    assert "No space left on device" in message and "results.csv is as it was" in message
    assert (out / results.CSV_NAME).read_bytes() == before
    assert json.loads((out / f"{record.run_id}.json").read_text())["run_id"] == record.run_id
    assert isinstance(caught.value, BenchError)  # one line at the CLI edge, not an internal error
