"""Parameter snapshots and their comparison (pure arithmetic), for bench verify (formulas in bench.commands.verify)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bench.errors import BenchError


def save_parameters(folder: Path, pairs: list[tuple[str, Any]], when: str) -> None:
    """Write (name, array) pairs to ``folder/<when>.npz``, whole or not at all."""
    tmp = folder / f".{when}.tmp.npz"
    np.savez(tmp, *[a for _, a in pairs], names=np.array([n for n, _ in pairs]))
    tmp.rename(folder / f"{when}.npz")


def load_parameters(path: Path) -> tuple[list[str], list[np.ndarray]]:
    with np.load(path) as data:
        count = len([k for k in data.files if k.startswith("arr_")])
        return [str(n) for n in data["names"]], [data[f"arr_{i}"] for i in range(count)]


def differences(initial: list[np.ndarray], reference: list[np.ndarray], candidate: list[np.ndarray]) -> dict:
    """max_abs, max_rel and of_update (see bench.commands.verify) of ``candidate`` against ``reference``."""
    if len(candidate) != len(reference) or any(a.shape != b.shape for a, b in zip(candidate, reference, strict=True)):
        raise BenchError("the mode's parameters do not have the reference's shapes")
    max_abs = max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(candidate, reference, strict=True))
    max_rel = max(float(np.max(np.abs(a.astype(np.float64) - b)) / max(float(np.max(np.abs(b))), 1e-30))
                  for a, b in zip(candidate, reference, strict=True))
    update = max(float(np.max(np.abs(b.astype(np.float64) - w0))) for b, w0 in zip(reference, initial, strict=True))
    return {"max_abs": max_abs, "max_rel": max_rel, "max_update": update,
            "of_update": max_abs / update if update > 0 else float("inf")}


def identical(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a, b, strict=True))
