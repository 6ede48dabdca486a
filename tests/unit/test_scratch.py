"""Removing the temporary folders of processes killed outright (bench.scratch.remove_orphaned); the folders
themselves, in real processes: tests/multiproc/test_scratch.py."""

import fcntl
import os

from bench import scratch
from bench.launching.supervise import STALL_DIR_PREFIX


def test_only_the_folders_nobody_holds_are_removed(tmp_path):
    """A process holds a flock on its folder while it runs (its own temporary folder, a spawner's stall folder);
    a later one removes the folders no one holds (their process was killed outright) and leaves held and new
    ones, and every other file."""
    held, orphan, young = (tmp_path / f"{scratch.PREFIX}{name}" for name in ("held", "orphan", "young"))
    stall = tmp_path / f"{STALL_DIR_PREFIX}orphan"
    for folder in (held, orphan, young, stall):
        folder.mkdir()
        (folder / "stall-1.txt").write_text("frozen")
    for folder in (held, orphan, stall):
        os.utime(folder, (0, 0))
    (tmp_path / "unrelated").mkdir()
    os.utime(tmp_path / "unrelated", (0, 0))
    fd = os.open(held, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert scratch.remove_orphaned(tmp_path, scratch.PREFIX) == [orphan]
        assert scratch.remove_orphaned(tmp_path, STALL_DIR_PREFIX, scratch.PREFIX) == [stall]
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([held.name, young.name, "unrelated"])
    assert scratch.remove_orphaned(tmp_path, scratch.PREFIX) == [held]  # its process gone: the lock with it


def test_a_folder_that_takes_no_lock_is_given_up_and_its_descriptor_closed(tmp_path, monkeypatch):
    """On a temporary folder whose filesystem takes no flock, no folder is taken (an unheld one would be removed as
    an orphan by the next process while this one writes in it), and nothing of the attempt is left: neither the
    folder nor an open descriptor."""
    import tempfile

    def no_lock(fd, operation):
        raise OSError(37, "No locks available")

    for name, value in (("_own", None), ("_system", None), ("_late", True)):
        monkeypatch.setattr(scratch, name, value)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(scratch.fcntl, "flock", no_lock)
    before = sorted(os.listdir("/proc/self/fd"))
    assert scratch.take() is None
    assert sorted(os.listdir("/proc/self/fd")) == before
    assert list(tmp_path.iterdir()) == []
    assert scratch.system_tempdir() == tmp_path
