"""What every record starts with: one run id and one header, for a run's result and for the records of bench
verify, allreduce, peak and diagnose (bench.records.store names the kinds)."""

from __future__ import annotations

import secrets
from datetime import datetime, timezone
from typing import Any

from bench import SCHEMA_VERSION, __version__
from bench.records.store import Kind


def utc_stamp() -> str:
    """Now in UTC, compact and sortable: 20261124T101500Z."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def new_run_id(label: str, stamp: str | None = None) -> str:
    """<UTC stamp>-<label>-<8 hex digits>: sortable by time, unique without coordination."""
    return f"{stamp or utc_stamp()}-{label}-{secrets.token_hex(4)}"


def header(run_id: str, kind: Kind = Kind.RESULT, schema_version: int = SCHEMA_VERSION) -> dict[str, Any]:
    """The fields every record carries first: its schema's version (a run's result's by default; bench diagnose's
    record has its own), kind (absent for a run's result), run id, creation time and the hvdbench version that
    wrote it."""
    fields: dict[str, Any] = {"schema_version": schema_version}
    if kind is not Kind.RESULT:
        fields["kind"] = kind.value
    fields.update(run_id=run_id, created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  hvdbench_version=__version__)
    return fields
