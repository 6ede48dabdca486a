"""A bench process's temporary folder of its own, gone however the process ends.

Libraries a rank loads write files into the system's temporary folder that only their exit handlers (atexit,
multiprocessing's finalizers) remove: TensorFlow's autograph one Python file per function it converts (20-40 per
TensorFlow rank), multiprocessing a ``pymp-*`` folder for its fork server's socket (the DataLoader workers').
A process that ends without running them leaves them behind: a rank the launcher SIGKILLs after its grace (one
blocked in a collective whose peer died), a rank killed with its spawner, the stall watchdog's exit, the
out-of-memory killer. The machine that ran this project's tests for two days held 3,000 such files.

So each ``bench`` process takes a folder of its own at its start (:func:`take`, from bench.cli.main, before any
library registers an exit handler, so that its removal runs after theirs): ``hvdbench-tmp-<pid>-*`` under the
system's temporary folder, on which it holds an exclusive flock while it runs (the kernel drops the lock however
the process ends, in any PID namespace), removed at exit; and first it removes the folders nobody holds
(:func:`remove_orphaned`), which processes killed outright left. Python's temporary folder (``tempfile.tempdir``)
becomes it in a process that imports TensorFlow (:func:`use_for_python`, from bench.tfutil.import_tf); a PyTorch
process keeps the system's, where torch.compile keeps its caches between runs, and only its multiprocessing folder
goes into it (:func:`use_for_multiprocessing`, where the loaders start their fork server). What must outlive the
process (a record saved aside, bench.records.store.fallback_dir) goes under :func:`system_tempdir`. Code that
imports bench in a process of its own (a test, a notebook) takes no folder, and nothing changes for it.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

PREFIX = "hvdbench-tmp-"

_system: Path | None = None  # the system's temporary folder, as it was before use_for_python
_own: Path | None = None  # this process's, once taken
# multiprocessing removes its folder in an exit handler, registered when multiprocessing.util is imported: before
# ours, it would run after ours and find its folder gone (a traceback at exit). Then nothing is moved into ours.
_late = True
# A Unix socket's path holds 107 bytes (sun_path's 108 with the NUL); multiprocessing's listener sockets are
# named <its folder>/listener-XXXXXXXX, in a folder <temporary folder>/pymp-XXXXXXXX.
UNIX_PATH_MAX = 107
LISTENER = len("/pymp-XXXXXXXX/listener-XXXXXXXX")


def system_tempdir() -> Path:
    """The system's temporary folder ($TMPDIR, else /tmp...), whatever this process made Python's."""
    return _system or Path(tempfile.gettempdir())


def remove_orphaned(root: Path, *prefixes: str, min_age_s: float = 60.0) -> list[Path]:
    """Remove the folders under ``root`` named ``prefix*`` that no live process holds: their process was killed
    outright and could not remove its own. Their process holds an exclusive flock on each while it runs; a folder
    younger than ``min_age_s`` is left alone (its process may not hold the lock yet). Returns those removed."""
    removed = []
    for path in sorted(p for prefix in prefixes for p in root.glob(f"{prefix}*")):
        try:
            if time.time() - path.stat().st_mtime < min_age_s:
                continue
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)  # a link: not ours
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: its process runs
        finally:
            os.close(fd)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def take() -> Path | None:
    """This process's own temporary folder, made and locked on the first call, removed when the process exits;
    None where the system's temporary folder takes no folder or no lock (files then go where they always did)."""
    global _own, _system, _late
    if _own is not None:
        return _own
    _late = "multiprocessing.util" in sys.modules
    root = Path(tempfile.gettempdir())
    remove_orphaned(root, PREFIX)
    pid = os.getpid()
    try:
        path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{pid}-", dir=root))
    except OSError:
        return None
    try:
        held = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        return None
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # a filesystem that takes no flock: an unheld folder would be another process's orphan
        os.close(held)
        shutil.rmtree(path, ignore_errors=True)
        return None

    def remove() -> None:
        if os.getpid() == pid:  # not in a forked child that inherited the handler
            shutil.rmtree(path, ignore_errors=True)
            os.close(held)

    atexit.register(remove)  # exit handlers run last registered first: those registered after this one, before it
    _system, _own = root, path
    return path


def _sockets_fit() -> bool:
    """Whether multiprocessing's sockets still have paths a Unix socket takes with their folder inside ours (a
    deep $TMPDIR, such as a job's folder on a cluster, may leave no room for ours)."""
    return _own is not None and len(os.fsencode(_own)) + LISTENER <= UNIX_PATH_MAX


def use_for_python() -> None:
    """Make this process's own folder Python's temporary folder (``tempfile.tempdir``): every library that asks
    :mod:`tempfile` writes there. Called before TensorFlow is imported; nothing where no folder was taken.
    Where multiprocessing's sockets would not fit inside it, multiprocessing's folder is made in the system's
    first."""
    if _own is None or _late:
        return
    if not _sockets_fit():
        import multiprocessing.util

        multiprocessing.util.get_temp_dir()
    tempfile.tempdir = str(_own)


def use_for_multiprocessing() -> None:
    """Make multiprocessing's temporary folder (its fork server's and listeners' sockets) a folder inside this
    process's own, leaving ``tempfile.tempdir`` as it is. multiprocessing makes that folder once per process
    (multiprocessing.util.get_temp_dir); made here first, it is made inside ours. Nothing where no folder was
    taken, or where the sockets' paths would be too long inside it."""
    import multiprocessing.util

    if _own is None or _late or not _sockets_fit():
        return
    saved, tempfile.tempdir = tempfile.tempdir, str(_own)
    try:
        multiprocessing.util.get_temp_dir()
    finally:
        tempfile.tempdir = saved
