"""A PostgreSQL server of its own for the tests and benchmarks of bench history: Debian's postgresql-15 package
(initdb and pg_ctl, /usr/lib/postgresql/15/bin), a cluster in a temporary folder, listening on a free port of
127.0.0.1 only, trust authentication for its one user; run as the postgres user when started by root (initdb
refuses root); stopped (immediate) and deleted however the caller ends.

    with postgres.server() as url:      # postgresql://bench@127.0.0.1:PORT/postgres
        ...
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BIN = Path("/usr/lib/postgresql/15/bin")


class Missing(RuntimeError):
    """PostgreSQL 15 is not installed here."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server() -> Iterator[str]:
    """A started server's URL; Missing where the package is not installed."""
    if not (BIN / "initdb").exists():
        raise Missing(f"PostgreSQL 15 is not installed here (no {BIN / 'initdb'}: apt-get install postgresql-15)")
    folder = Path(tempfile.mkdtemp(prefix="hvdbench-pg-", dir="/tmp"))
    as_user = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port, data = free_port(), folder / "data"

    def pg(*args) -> None:
        done = subprocess.run([*as_user, *map(str, args)], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{Path(str(args[0])).name} failed: {(done.stdout + done.stderr)[-2000:]}")
    try:
        pg(BIN / "initdb", "-D", data, "-A", "trust", "-U", "bench")
        pg(BIN / "pg_ctl", "-D", data, "-l", folder / "log", "-w", "-o",
           f"-p {port} -k {folder} -c listen_addresses=127.0.0.1", "start")
        yield f"postgresql://bench@127.0.0.1:{port}/postgres"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run([*as_user, str(BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                           capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)
