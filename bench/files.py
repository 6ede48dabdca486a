"""Writing files whole: never a half-written or overwritten record, modes that follow the umask, and one
clear reason when the disk refuses (full, read-only, over quota).

Every file bench writes for a person to keep (results, results.csv, telemetry series, sweep manifests and
cell configurations, verify and allreduce records) goes through :func:`write_new` (a record: appears whole
or not at all, and never replaces a file) or :func:`replace` (a file that is rewritten: the old content stays
until the new one is whole). Both create the file with the mode ``0666 & ~umask``, as ``open()`` would: a
temporary file from :func:`tempfile.mkstemp` is 0600 whatever the umask, and a hard link or rename keeps that
mode, so without this a teammate could not read a shared results folder.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def disk_reason(exc: OSError) -> str:
    """The OS's words for why a write failed ("No space left on device", "Read-only file system", "Disk quota
    exceeded", ...): what the one error line says, never an internal error."""
    return exc.strerror or str(exc)


def file_mode() -> int:
    """0666 less the process's umask: the mode ``open()`` gives a new file."""
    current = os.umask(0)
    os.umask(current)
    return 0o666 & ~current


def _temporary(folder: Path, suffix: str, text: str) -> str:
    """A whole, fsynced temporary file with ``text`` in ``folder`` (the same filesystem as the target)."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=suffix)
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def replace(path: Path, text: str) -> None:
    """Make ``path`` hold ``text``: the old content (or no file) until the new one is whole on disk."""
    tmp = _temporary(path.parent, path.suffix, text)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_new(final: Path, text: str) -> None:
    """Make ``final`` appear whole, or not at all, and only if it did not exist (FileExistsError if it did).

    The content goes to a temporary file in the same folder first (fsynced). It is then hard-linked to the
    final name, which fails if that exists. Filesystems without hard links (some network and FUSE ones,
    vfat) take the fallback: create the final name exclusively (O_EXCL, so never overwriting), then rename
    the temporary file over that empty placeholder; if renaming is refused too, write into the placeholder.
    """
    tmp = _temporary(final.parent, final.suffix, text)
    try:
        try:
            os.link(tmp, final)
            return
        except FileExistsError:
            raise
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                raise  # the disk refused: no other way will do better
        placeholder = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode())
        try:
            try:
                os.replace(tmp, final)
            except OSError:
                with os.fdopen(placeholder, "w", newline="", closefd=False) as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
        except BaseException:
            os.unlink(final)  # never an empty or partial record under the final name
            raise
        finally:
            os.close(placeholder)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
