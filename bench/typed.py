"""The pydantic helpers every record and section model shares: the open model (keeps fields it does not name), one
line for the first field that departs from a model, and a parse that raises it. A leaf: the measurements' modules
(bench.measure, bench.data) define their section models with it, and bench.records assembles them, never the other
way round."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from bench.errors import BenchError

M = TypeVar("M", bound=BaseModel)


class Open(BaseModel):
    """A section that keeps its required fields typed and allows more (free-form per-rank details)."""
    model_config = ConfigDict(extra="allow")


def parse(data: Any, model: type[M], where: str) -> M:
    """``data`` as ``model``, or one line naming ``where`` and the first field that departs from it."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BenchError(f"{where} does not match its schema ({model.model_config.get('title') or model.__name__}): "
                         f"{first_problem(exc)}") from None


def first_problem(exc: ValidationError) -> str:
    """The first field that departs from a model, in one line, with how many do."""
    first = exc.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']} ({exc.error_count()} problem(s))"
