"""A node check's verdict as Kubernetes takes it: node labels in a patch file, and the taint as a command.

``--node-patch DIR`` on ``bench preflight``, ``bench soak`` and ``bench diagnose`` writes, per node judged,
DIR/<node>-<check>.json, a JSON merge patch of the Node (dry run: nothing is sent)::

    metadata.labels      hvdbench.io/<check>: pass | warning | error      (what a nodeSelector or affinity reads)
                         hvdbench.io/<check>-at: 20261203T194912Z          (when, UTC)
    metadata.annotations hvdbench.io/<check>: the errors and warnings in a line, and the record

and prints the commands that apply it::

    kubectl patch node NODE --type merge --patch-file DIR/NODE-CHECK.json
    kubectl taint node NODE hvdbench.io/CHECK=error:NoSchedule --overwrite     (an error: no new pods)
    kubectl taint node NODE hvdbench.io/CHECK:NoSchedule-                      (no error: lift an earlier one)

The taint is a command, not part of the patch: a Node's ``spec.taints`` is one list without a merge key, so a
patch that sets it replaces every taint the node has (the GPU operator's, the cluster's own), where
``kubectl taint`` adds or removes this one. The file is replaced whole on every run: it is the node's current
state (each run's record is kept apart). Google's GPU health scanner and IBM's autopilot label nodes the same way.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path

from bench import files
from bench.errors import BenchError

DOMAIN = "hvdbench.io"
# RFC 1123 subdomain: a Kubernetes node's name.
_NODE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
ANNOTATION_CHARS = 1000
# The options' words, declared here once for every command that takes them.
NODE_PATCH_HELP = ("Write this node's verdict as Kubernetes node labels (a merge patch, DIR/<node>-<check>.json, "
                   "replaced each run) and print the kubectl commands that apply it and its taint (docs/soak.md).")
NODE_HELP = "The Kubernetes node's name for --node-patch (default: $NODE_NAME, else this host's short name)."


def node_name(given: str = "") -> str:
    """``given``, else $NODE_NAME (a pod's downward API sets it), else this host's short name, checked as the
    name of a Kubernetes node."""
    name = given or os.environ.get("NODE_NAME") or socket.gethostname().split(".")[0].lower()
    if len(name) > 253 or not _NODE.fullmatch(name):
        raise BenchError(f"'{name}' is not a Kubernetes node name (lowercase letters, digits, '-' and '.'; "
                         "--node gives one)")
    return name


def prepare(folder: str, node: str) -> str:
    """Before any check runs: the node's name (``node_name``) with a --node-patch ``folder`` ("" without one), the
    folder made; a bad name or a folder that cannot be written is one line."""
    if not folder:
        return ""
    name = node_name(node)
    path = Path(folder)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BenchError(f"--node-patch {folder}: cannot make the folder ({files.disk_reason(exc)})") from None
    if not os.access(path, os.W_OK):
        raise BenchError(f"--node-patch {folder}: cannot write there")
    return name


def status(errors: list[str], warnings: list[str]) -> str:
    return "error" if errors else "warning" if warnings else "pass"


def patch(check: str, errors: list[str], warnings: list[str], when: str, record: str | None = None) -> dict:
    """The Node merge patch for one node's verdict: ``errors`` and ``warnings`` name what was found."""
    line = f"{len(errors)} error(s), {len(warnings)} warning(s)"
    named = "; ".join(errors + warnings)
    if named:
        line += f": {named}"
    if record:
        line += f" (record: {record})"
    if len(line) > ANNOTATION_CHARS:
        line = line[:ANNOTATION_CHARS - 3] + "..."
    return {"metadata": {"labels": {f"{DOMAIN}/{check}": status(errors, warnings), f"{DOMAIN}/{check}-at": when},
                         "annotations": {f"{DOMAIN}/{check}": line}}}


def commands(node: str, check: str, path: Path, failed: bool) -> list[str]:
    taint = f"{DOMAIN}/{check}"
    return [f"kubectl patch node {node} --type merge --patch-file {path}",
            f"kubectl taint node {node} {taint}=error:NoSchedule --overwrite" if failed
            else f"kubectl taint node {node} {taint}:NoSchedule-  # lifts an earlier check's taint, if any"]


def named(findings, status_: str) -> list[str]:
    """'check member' of each finding (preflight's, soak's: .check, .member, .status) of that status."""
    return [f"{f.check} {f.member}" for f in findings if f.status == status_]


def write(folder: str, node: str, check: str, errors: list[str], warnings: list[str], when: str,
          record: str | None = None) -> list[str]:
    """DIR/<node>-<check>.json, replaced whole; the commands that apply it."""
    path = Path(folder) / f"{node}-{check}.json"
    body = patch(check, errors, warnings, when, record)
    try:
        files.replace(path, json.dumps(body, indent=2) + "\n")
    except OSError as exc:
        raise BenchError(f"cannot write the node patch {path}: {files.disk_reason(exc)}") from None
    return commands(node, check, path, bool(errors))
