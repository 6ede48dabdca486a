"""Terminal tables: a column that holds what users type (a mode, a model, a sweep cell, a host) is never cut.

Rich wraps or ellipsizes a column when the terminal or a pipe is narrow; an identifier cut to ``transformer…``
can be neither read nor grepped. :func:`never_cut` gives such columns the width of their longest value and no
wrapping; the other columns give way (descriptions and notes wrap).
"""

from __future__ import annotations

from typing import Any


def never_cut(table: Any, *headers: str) -> Any:
    """Keep every value of the columns named ``headers`` whole (call after the rows are added)."""
    for column in table.columns:
        if column.header in headers:
            column.no_wrap = True
            column.min_width = max([len(str(column.header)), *(len(str(cell)) for cell in column.cells)])
    return table
