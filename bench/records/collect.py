"""Results read back together, for bench report, compare and predict: the result files under folders (one
bad file skipped with a warning, or fatal with --strict), each result's cell key, the newest result per cell
and its repeats, and whether two cells' confidence intervals overlap. Each file is read as
:func:`bench.records.results.load_result` reads one."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import BenchError
from bench.models import describe_inputs
from bench.modes import mode_label
from bench.records.results import CONFIGS_DIR, MANIFEST, upgraded


@dataclass(frozen=True)
class Key:
    label: str  # mode, or mode:strategy for modes with strategies
    mode: str
    model: str
    precision: str
    batch_size: int
    inputs: str  # the workload's input shape in words: 224x224, seq 128

    @property
    def setting(self) -> tuple:
        return self.model, self.precision, self.batch_size, self.inputs

    def setting_text(self) -> str:
        return f"{self.model} {self.inputs}, batch {self.batch_size}/device, {self.precision}"


def label_of(result: dict[str, Any]) -> str:
    return mode_label(result["mode"], result["config"].get("strategy"))


def key_of(result: dict[str, Any]) -> Key:
    c = result["config"]
    return Key(label_of(result), result["mode"], c["model"], c["precision"], c["batch_size"], describe_inputs(c))



OTHER_KINDS = ("verify", "allreduce", "peak")


def load_results(paths: list[Path], skipped: list[tuple[Path, str]] | None = None) -> list[dict[str, Any]]:
    """Every result under the given files or folders.

    A file that is not one (unreadable, truncated or foreign JSON, another schema version, not valid against
    the schema) is one clear error; or, when ``skipped`` is a list, it is appended there as (path, reason),
    warned about in one line on standard error, and the others are read on (bench report and compare
    without --strict: one bad file in a shared folder must not stop a report)."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += [f for f in sorted(p.rglob("*.json"))
                      if f.name != MANIFEST and f.parent.name != CONFIGS_DIR]  # a sweep's cell configs
        elif p.is_file():
            files.append(p)
        else:
            raise BenchError(f"{p} does not exist")
    if not files:
        raise BenchError(f"no hvdbench results (*.json) in {', '.join(map(str, paths))}")
    results = []
    for f in files:
        try:
            data = _read_result(f)
        except BenchError as exc:
            if skipped is None:
                raise
            skipped.append((f, str(exc)))
            print(f"warning: skipped {exc}", file=sys.stderr)
            continue
        if data is not None:
            results.append(data)
    if not results:
        raise BenchError(f"no hvdbench training results in {', '.join(map(str, paths))}")
    versions = sorted({r["schema_version"] for r in results})
    if len(versions) > 1:
        raise BenchError(f"results of different schema versions ({', '.join(map(str, versions))}) cannot be "
                         "reported together")
    ok = [r for r in results if r["status"] == "ok"]
    if not ok:
        raise BenchError("no result with status 'ok'")
    return ok


def _read_result(f: Path) -> dict[str, Any] | None:
    """One training result (None for a verify or allreduce record sharing the folder), or a BenchError that
    names the file."""
    try:
        data = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BenchError(f"{f} is not readable JSON ({exc})") from None
    if isinstance(data, dict) and data.get("kind") in OTHER_KINDS:
        return None  # bench verify / allreduce / peak records sharing the folder: not training runs
    if not isinstance(data, dict) or "schema_version" not in data or "run_id" not in data:
        raise BenchError(f"{f} is not an hvdbench result")
    data = upgraded(data, str(f))
    data["_path"] = str(f)
    return data


def table_cells(results: list[dict[str, Any]]) -> tuple[dict[Key, dict[int, dict]], dict]:
    """{key: {n: result}} using the newest result per cell, and {(key, n): [older results]}."""
    cells: dict[Key, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        cells[key_of(r)][r["world_size"]].append(r)
    chosen, repeats = {}, {}
    for key, by_n in cells.items():
        chosen[key] = {}
        for n, rs in by_n.items():
            rs.sort(key=lambda r: r["created_utc"])
            chosen[key][n] = rs[-1]
            repeats[(key, n)] = rs[:-1]
    return chosen, repeats


def ci_overlap(a: dict, b: dict) -> bool | None:
    ca, cb = a["summary"].get("ci95"), b["summary"].get("ci95")
    if not ca or not cb:
        return None
    return not (ca[1] < cb[0] or cb[1] < ca[0])
