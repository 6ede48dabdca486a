"""The benchmarks: scripts that run bench (and the field's own loops beside it) and print a table.

They read what a run wrote as its typed record, the models the report and compare read: a result through
bench.records.results.load_result (older schemas upgraded), any other kind through bench.records.store.load;
either way the file is checked against its model, and a field the scripts name is one the model has."""

from __future__ import annotations

from pathlib import Path

from bench.records.results import load_result
from bench.records.schema import Result


def results_in(out: Path) -> set[Path]:
    """The record files in a run's output folder now: what :func:`new_file` compares with after the run."""
    return set(out.glob("*.json"))


def new_file(out: Path, before: set[Path]) -> Path:
    """The one record file a run added to ``out`` since ``before`` (:func:`results_in`)."""
    (new,) = results_in(out) - before
    return new


def new_result(out: Path, before: set[Path]) -> Result:
    """The one result a run added to ``out`` since ``before``, as its typed record."""
    return load_result(new_file(out, before))
