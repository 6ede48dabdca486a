"""The built-in trackers (bench.measure.tracker), named by module and imported on first use, and every registered
tracker in the order the loop calls them."""

from __future__ import annotations

import importlib

from bench.measure.tracker import TRACKERS, Tracker

# Their modules, in the order the loop calls them at each point (the trace's steps come before the attribution's)
# and the run's table shows their rows.
BUILTIN = ("bench.measure.graphs", "bench.data.feed", "bench.measure.host_load", "bench.measure.trace",
           "bench.measure.attribution", "bench.measure.telemetry", "bench.measure.traffic")


def trackers() -> list[type[Tracker]]:
    """Every registered tracker: the built-in ones (imported here, once) in their order, then the plugins'."""
    for module in BUILTIN:
        importlib.import_module(module)
    order = {module: i for i, module in enumerate(BUILTIN)}
    return sorted(TRACKERS.values(), key=lambda t: order.get(t.__module__, len(BUILTIN)))
