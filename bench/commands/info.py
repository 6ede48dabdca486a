"""The commands that print what this install holds: ``bench models``, ``bench env`` and ``bench schema``.

Each one's options are declared once in its configuration (bench.config.option) and each renders its own output:
a table for people, ``--json`` for scripts.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

from bench.config import option
from bench.errors import BenchError
from bench.models import MODELS
from bench.records import env as environment
from bench.records.schema import json_schema
from bench.records.store import Kind
from bench.tables import never_cut


@dataclass(frozen=True)
class ModelsConfig:
    as_json: bool = option(False, "Print JSON (one object per model).", flag="--json")


@dataclass(frozen=True)
class ModelRow:
    """One model as ``bench models`` lists it (``--json``: these fields)."""
    model: str
    kind: str  # its workload's: image, sequence
    unit: str
    parameters: int  # at its default classes or vocabulary
    default_classes: int
    default_image_size: int | None
    min_image_size: int | None
    default_seq_len: int | None
    batch_norm: bool
    sparse_embeddings: bool
    description: str

    @property
    def inputs(self) -> str:
        if self.default_seq_len:
            return f"seq {self.default_seq_len}, vocab {self.default_classes:,}"
        return f"{self.default_image_size}x{self.default_image_size}"


def models(cfg: ModelsConfig) -> int:
    """bench models: every model's workload kind, parameters (at its default classes or vocabulary), input sizes."""
    rows = [ModelRow(model=spec.name, kind=spec.workload.kind, unit=spec.workload.unit,
                     parameters=spec.parameters(spec.default_classes), default_classes=spec.default_classes,
                     default_image_size=spec.default_image_size, min_image_size=spec.min_image_size,
                     default_seq_len=spec.default_seq_len, batch_norm=spec.batch_norm,
                     sparse_embeddings=spec.sparse_embeddings, description=spec.description)
            for spec in MODELS.values()]
    if cfg.as_json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table()
    table.add_column("model")  # what users type: never cut (the description wraps)
    for column in ("kind", "parameters", "default input", "min image"):
        table.add_column(column, no_wrap=True)
    table.add_column("description", overflow="fold")
    for r in rows:
        table.add_row(r.model, r.kind, f"{r.parameters:,}", r.inputs, str(r.min_image_size or "–"), r.description)
    Console().print(never_cut(table, "model"))
    return 0


@dataclass(frozen=True)
class EnvConfig:
    as_json: bool = option(False, "Print JSON.", flag="--json")
    check: bool = option(False, "Also fail (exit 1) when a framework's process loads two NCCLs or CUDA runtimes, "
                         "or one from outside its environment.", flag="--check")


def env(cfg: EnvConfig) -> int:
    """bench env: the environment every result records (versions, GPUs, MPI, container, loaded libraries)."""
    record = environment.full()
    if cfg.as_json:
        print(json.dumps(record, indent=2))
    else:
        from rich.console import Console
        from rich.pretty import Pretty

        Console().print(Pretty(record))
    if cfg.check:
        for line in environment.library_lines(record):
            print(f"libraries: {line}", file=sys.stderr)
        problems = environment.library_problems(record)
        if problems:
            raise BenchError("libraries: " + "; ".join(problems))
        print("libraries: each framework's process loads at most one NCCL and one CUDA runtime, its own",
              file=sys.stderr)
    return 0


@dataclass(frozen=True)
class SchemaConfig:
    kind: Kind = option(Kind.RESULT, "The record kind: result (a run's, the default), verify, allreduce, peak, "
                                     "diagnose, diagnose-baseline, data-bench, converge, tune or soak.", argument=True)
    diagnose: bool = option(False, "The schema of bench diagnose's record (the same as KIND diagnose).",
                            flag="--diagnose")


def schema(cfg: SchemaConfig) -> int:
    """bench schema [KIND]: the JSON Schema of a record kind: the result file every run writes by default, or
    the record of bench verify, allreduce, peak, diagnose (and its baseline), data bench, converge or tune."""
    print(json.dumps(json_schema(Kind.DIAGNOSE.value if cfg.diagnose else cfg.kind.value), indent=2))
    return 0
