"""The one record store: every kind of record bench keeps, named once, written one way and read back one way.

A record is a JSON file a person keeps: a run's result, and the records of bench verify, allreduce, peak,
diagnose, data bench and converge, and diagnose's baseline. Each is

* named once here (:class:`Kind`): the string its file carries in ``kind`` (a run's result carries none, as
  it always has);
* written by :func:`write`: checked against its kind's model first (bench.records.schema, bench.records.kinds;
  ``bench schema KIND`` prints each), whole or not at all (bench.files.write_new: a temporary file, then a link
  or an exclusive create), never over an existing file, with the umask's mode; when its folder refuses it
  (full, read-only, over quota, gone) it is saved under :func:`fallback_dir` and the error names that path, and
  when no fallback takes it either, the JSON goes to standard error: a finished measurement is never lost;
* read by :func:`read`: one clear error for a file that is unreadable, not JSON, or not of the kind asked for.

Files beside a record that are rewritten in place (results.csv, a sweep's manifest) go through
bench.files.replace; companion files (a telemetry series, diagnose.md) through files.write_new.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bench import files, scratch
from bench.errors import BenchError, ResultNotWhole
from bench.records.schema import mismatch, record_model
from bench.typed import M, parse


class Kind(str, Enum):
    RESULT = "result"  # a training run (bench torch-ddp, ...): its file has no "kind" field
    VERIFY = "verify"
    ALLREDUCE = "allreduce"
    PEAK = "peak"
    DIAGNOSE = "diagnose"
    BASELINE = "diagnose-baseline"
    DATA_BENCH = "data-bench"
    CONVERGE = "converge"
    TUNE = "tune"
    SOAK = "soak"


def kind_of(data: Any) -> Kind | None:
    """The kind of a record's content; None for JSON that is no record of bench's."""
    if not isinstance(data, dict):
        return None
    if "kind" not in data:
        return Kind.RESULT if "schema_version" in data and "run_id" in data else None
    try:
        return Kind(data["kind"])
    except ValueError:
        return None


def write(path: Path, record: dict[str, Any] | BaseModel) -> Path:
    """Write ``record`` (its kind's model, or its content) as JSON to ``path`` whole, after checking it against its
    kind's model (bench.records.schema.record_model); refuse if the file exists (never overwritten). A record
    that does not match its model is not written there (a reader would refuse it) but saved as the module
    docstring says, and the error names the field. See the module docstring for the fallback."""
    if isinstance(record, BaseModel):  # the fields its builder set: an optional figure not measured stays absent
        record = record.model_dump(mode="json", exclude_unset=True, by_alias=True)
    text = json.dumps(record, indent=2, sort_keys=False) + "\n"
    kind = kind_of(record)
    problem = "it is of no kind hvdbench keeps" if kind is None else mismatch(record, kind.value)
    if problem:
        raise ResultNotWhole(f"{path} not written: the record does not match its schema ({problem}); it is "
                             f"{kept(path.name, text)}")
    try:
        files.write_new(path, text)
    except FileExistsError:
        raise BenchError(f"{path} already exists; not overwritten") from None
    except OSError as exc:
        raise ResultNotWhole(f"could not write {path} ({files.disk_reason(exc)}); the record is "
                             f"{kept(path.name, text)}") from None
    return path


def kept(name: str, text: str) -> str:
    """Keep a record that could not be written where asked: in the first fallback folder that takes it, else on
    standard error. Where it went, in words."""
    saved = save_fallback(name, text)
    if saved is None:
        sys.stderr.write(text)
        return "printed above on standard error: no fallback folder could take it either"
    return f"saved to {saved} instead"


def read(path: str | os.PathLike, *kinds: Kind) -> dict[str, Any]:
    """A record file's content, checked to be one of ``kinds`` (any record when none is named)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BenchError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    kind = kind_of(data)
    if kind is None:
        raise BenchError(f"{path} is not a record of hvdbench")
    if kinds and kind not in kinds:
        raise BenchError(f"{path} is not a record of kind {' or '.join(k.value for k in kinds)} (it is of kind "
                         f"{kind.value})")
    return data


def load(path: str | os.PathLike, model: type[M]) -> M:
    """A record file as its kind's model (bench.records.schema.record_model): one clear error for a file that is
    unreadable, of another kind, or does not match the model. A run's result is read by
    bench.records.results.load_result, which upgrades older schemas first."""
    kind = next(k for k in Kind if record_model(k.value) is model)
    return parse(read(path, kind), model, str(path))


def fallback_dir() -> list[Path]:
    """Where a record goes when its folder cannot take it: $HVDBENCH_FALLBACK_DIR, then
    ~/.cache/hvdbench/unsaved, then the system's temporary folder (not the process's own, which goes with it)."""
    dirs = [Path(d) for d in (os.environ.get("HVDBENCH_FALLBACK_DIR"),) if d]
    return [*dirs, Path.home() / ".cache" / "hvdbench" / "unsaved", scratch.system_tempdir() / "hvdbench-unsaved"]


def save_fallback(name: str, text: str) -> Path | None:
    for folder in fallback_dir():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / name
            if path.exists():
                path = folder / f"{path.stem}-{secrets.token_hex(3)}{path.suffix}"
            files.write_new(path, text)
            return path
        except OSError:
            continue
    return None
