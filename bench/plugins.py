"""Plugins: modules named in HVDBENCH_PLUGINS (comma-separated) are imported when bench starts.

A plugin registers modes (bench.modes.register) and models (bench.models.register) at import; every
command then sees them, and so do the ranks bench spawns (they inherit the variable). A plugin that
cannot be imported is one clear error, not a traceback.
"""

from __future__ import annotations

import importlib
import os

from bench.errors import BenchError

PLUGINS_ENV = "HVDBENCH_PLUGINS"


def load(environ=os.environ) -> list[str]:
    names = [n.strip() for n in environ.get(PLUGINS_ENV, "").split(",") if n.strip()]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise BenchError(f"{PLUGINS_ENV}: cannot import plugin '{name}' ({exc})") from None
    return names
