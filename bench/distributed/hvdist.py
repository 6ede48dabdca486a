"""Horovod for either framework, for the Horovod modes and allreduce backends (imports horovod.<framework> lazily)."""

from __future__ import annotations

import importlib
import os
import socket
from collections.abc import Callable, MutableMapping
from contextlib import nullcontext
from typing import Any

from bench.errors import BenchError, MissingDependency
from bench.launching.detect import LaunchInfo, detect, resolve_error
from bench.records import env
from bench.tfutil import import_tf, quiet_startup
from bench.vocabulary import FRAMEWORK_NAMES, HOROVOD_KNOBS


def import_hvd(framework: str, mode: str):
    """horovod.torch or horovod.tensorflow, or one clear error (TensorFlow's start-up lines kept quiet)."""
    quiet = nullcontext
    if framework == "tensorflow":
        try:
            import_tf()
        except BenchError as exc:  # no TensorFlow: no horovod.tensorflow either
            raise MissingDependency(str(exc)) from None
        quiet = quiet_startup
    try:
        with quiet():
            return importlib.import_module(f"horovod.{framework}")
    except ImportError as exc:
        raise MissingDependency(f"{mode} needs Horovod built with {FRAMEWORK_NAMES[framework]} support ({exc}); "
                         "run 'make venv' or use the hvdbench image") from None


def patch_level() -> int:
    """The hvdbench patch level of the installed Horovod (docker/horovod/*.patch); 0 for a stock build."""
    try:
        return importlib.import_module("horovod._hvdbench_patch").PATCH_LEVEL
    except (ImportError, AttributeError):
        return 0


# Level 2 fixed Horovod 0.28.1's Gloo crash on an unresolvable host name (docker/horovod/0.28.1.patch).
GLOO_HOSTNAME_FIX = 2


def uses_gloo(hvd, environ: MutableMapping[str, str]) -> bool:
    """Whether Horovod will open Gloo contexts: the Gloo controller (horovodrun --gloo, our spawner),
    Gloo CPU operations, or a build without MPI. Under the MPI controller Gloo stays off."""
    return (environ.get("HOROVOD_CONTROLLER", "").lower() == "gloo"
            or environ.get("HOROVOD_CPU_OPERATIONS", "").lower() == "gloo"
            or "HOROVOD_GLOO_RENDEZVOUS_ADDR" in environ or not hvd.mpi_built())


def check_host_name(launch: LaunchInfo, environ: MutableMapping[str, str] = os.environ,
                    hostname: str | None = None, resolve: Callable[[str], str | None] = resolve_error,
                    level: int | None = None) -> None:
    """Make Horovod's Gloo work when this host's own name does not resolve, or fail in one clear line.

    Gloo finds this process's address from HOROVOD_GLOO_IFACE when it is set, else by resolving the host
    name. With every rank on this node the loopback interface is enough, so it is chosen; across nodes
    the interface that reaches the peers is not ours to guess. Stock Horovod 0.28.1 ignores the interface
    for its process-set context and dereferences a failed lookup (SIGSEGV): it needs the name to resolve.
    """
    name = hostname or socket.gethostname()
    why = resolve(name)
    if why is None:
        return
    fix = (f"make '{name}' resolve on every node (/etc/hosts or DNS; in Docker: --hostname localhost for one "
           "node, --add-host or a user-defined network across nodes)")
    if (patch_level() if level is None else level) < GLOO_HOSTNAME_FIX:
        raise BenchError(f"this host's name '{name}' does not resolve ({why}) and this Horovod build crashes "
                         f"in Gloo without it (hvdbench's patched build does not): {fix}")
    if environ.get("HOROVOD_GLOO_IFACE"):
        return
    if launch.local_world_size >= launch.world_size:
        environ["HOROVOD_GLOO_IFACE"] = "lo"  # every rank is here: loopback reaches them all
        return
    raise BenchError(f"this host's name '{name}' does not resolve ({why}), and Horovod's Gloo needs it to find "
                     f"this node's address for the other nodes: {fix}, or set HOROVOD_GLOO_IFACE to the "
                     "network interface that reaches them")


KNOBS = HOROVOD_KNOBS  # option -> (its variable, Horovod's default), read by hvd.init()


def set_knobs(cfg: Any, environ: MutableMapping[str, str] = os.environ) -> None:
    """The run's --fusion-threshold, --cycle-time and --nccl-streams into the variables hvd.init() reads (the
    options win over the variables; whichever launcher started the rank)."""
    for name, (variable, _) in KNOBS.items():
        value = getattr(cfg, name, None)
        if value is not None:
            environ[variable] = f"{value:g}" if isinstance(value, float) else str(value)
    if getattr(cfg, "trace", None):  # --trace starts and stops the timeline around its steps (bench.measure.trace)
        environ.setdefault("HOROVOD_TIMELINE", "DYNAMIC")


def knob_values(environ: MutableMapping[str, str] = os.environ) -> dict[str, Any]:
    """What Horovod ran with: each knob's value, from its variable (set by the option, the user or horovodrun's
    own flags) or Horovod's default, and which of the two (``knobs_set``)."""
    values: dict[str, Any] = {}
    for name, (variable, default) in KNOBS.items():
        text = environ.get(variable)
        try:
            values[name] = type(default)(float(text)) if text is not None else default
        except ValueError:
            values[name] = text  # Horovod's own parse decides; kept as written
    values["knobs_set"] = sorted(n for n, (variable, _) in KNOBS.items() if variable in environ)
    return values


def init(hvd, rank: int, world_size: int, cfg: Any = None) -> None:
    """hvd.init() with the run's knobs (set_knobs), then check Horovod agrees with the launcher about who is who."""
    if uses_gloo(hvd, os.environ):
        check_host_name(detect())
    if cfg is not None:
        set_knobs(cfg)
    hvd.init()
    if hvd.rank() != rank or hvd.size() != world_size:
        raise BenchError(f"Horovod says rank {hvd.rank()}/{hvd.size()} but the launcher said {rank}/{world_size}")


def environment(hvd, framework: str, on_gpu: bool) -> dict[str, Any]:
    return {"horovod": env.horovod_info(framework),
            "distribution": {"library": "horovod", "controller": "mpi" if hvd.mpi_enabled() else "gloo",
                             "nccl": bool(hvd.nccl_built()) and on_gpu, **knob_values()}}


def allgather_object(hvd, obj: Any) -> list[Any]:
    """Every rank's ``obj``, through Horovod. One name for every call: Horovod names the collective after the
    object's type by default, so ranks gathering objects of different types (a run id on rank 0, None elsewhere)
    would each wait for a collective the others never submit."""
    return hvd.allgather_object(obj, name="hvdbench.allgather_object")
