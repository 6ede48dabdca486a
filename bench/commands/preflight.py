"""``bench preflight``: the environment faults that spoil a run, found before it (bench.measure.env_faults).

Run it on each node (``srun -N2 --ntasks-per-node=1 bench preflight``, or in the image): the driver against the
CUDA each framework was built for, every GPU (other processes, uncorrected ECC errors, pending page retirements
and row remaps), the interfaces NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME name, the interface that reaches each
of ``--hosts`` (by default the other nodes of the Slurm allocation), the InfiniBand ports' state and rate, and the
kernel log's Xid and SXid events since boot (bench.measure.kernel_log), and the host's own settings: governor,
C-states, NUMA balancing, IOMMU, huge pages, swap, limits, srun's PMIx, the container runtime's GPU hook
(bench.measure.host_prescreen). A table for people, ``--json`` for scripts; exit 1 when a finding is an error.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import dataclass

from bench.config import comma_list, option
from bench.errors import check_exit_codes, judged, nagios
from bench.launching.slurm import expand_nodelist
from bench.measure import env_faults, host_prescreen, kernel_log, thresholds
from bench.measure.nvml import load_nvml
from bench.records import env as environment
from bench.records import node_patch
from bench.records.header import utc_stamp
from bench.records.node_patch import NODE_HELP, NODE_PATCH_HELP

MARK = {"error": "[red]error[/]", "warning": "[yellow]warning[/]", "ok": "[green]ok[/]", "n/a": "n/a"}


@dataclass(frozen=True)
class PreflightConfig:
    hosts: tuple[str, ...] = option((), "Comma-separated hosts the run will span: each must resolve and be reached "
                                        "through the interface NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME name "
                                        "(default: the other nodes of the Slurm allocation, if there is one).",
                                    parse=comma_list, shown="")
    frameworks: bool = option(True, "Import each framework (its own environment in the CUDA image) to read the CUDA "
                                    "it was built for, a few seconds; --no-frameworks checks the rest only.",
                              flag="--frameworks/--no-frameworks")
    thresholds: str = option("", "A threshold pack (TOML, docs/soak.md) over the shipped ones: published ECC "
                                 "and row-remap limits per GPU model, each value with its source.")
    as_json: bool = option(False, "Print JSON: one object per finding.", flag="--json")
    exit_codes: str = option("bench", "Exit statuses: bench (1 on an error), or nagios (0 ok, 1 a warning, 2 an "
                                      "error, 3 could not check), as Nagios-style monitors read them.")
    node_patch: str = option("", NODE_PATCH_HELP)
    node: str = option("", NODE_HELP)

    def __post_init__(self) -> None:
        check_exit_codes(self.exit_codes)


def other_nodes(cfg: PreflightConfig) -> list[str]:
    if cfg.hosts:
        return list(cfg.hosts)
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    here = {socket.gethostname(), socket.gethostname().split(".")[0]}
    return [n for n in expand_nodelist(nodelist) if n not in here] if nodelist else []


def findings(cfg: PreflightConfig) -> list[env_faults.Finding]:
    packs = thresholds.load(cfg.thresholds or None)  # a bad pack is one line before any check
    out: list[env_faults.Finding] = []
    if cfg.frameworks:
        record = environment.full()
        nvml = record.get("nvml") or {}
        built = {name: (record.get(key) or {}).get("cuda") for name, key in (("PyTorch", "torch"),
                                                                               ("TensorFlow", "tensorflow"))
                 if record.get(key)}
        out += env_faults.driver_findings(nvml.get("driver"), nvml.get("cuda_driver_version"), built)
    module, reason = load_nvml()
    addresses: dict[str, str] = {}
    if module is None:
        out.append(env_faults.Finding("gpu", "-", "n/a", f"no NVIDIA GPU to check: {reason}"))
    else:
        try:
            out += env_faults.gpu_findings(module, packs=packs)
            addresses = kernel_log.gpu_addresses(module)
        finally:
            module.nvmlShutdown()
    out += kernel_log.findings(*kernel_log.read(), addresses)
    out += host_prescreen.findings(inside=environment.container())
    out += env_faults.network_findings(dict(os.environ), other_nodes(cfg))
    out += env_faults.infiniband_findings(dict(os.environ))
    return out


def main(cfg: PreflightConfig) -> int:
    """bench preflight: print every finding; exit 1 when one is an error (--exit-codes nagios: 0, 1, 2 or 3)."""
    return judged(lambda: report(cfg), cfg.exit_codes)


def report(cfg: PreflightConfig) -> int:
    node = node_patch.prepare(cfg.node_patch, cfg.node)
    found = findings(cfg)
    errors = [f for f in found if f.status == "error"]
    if cfg.as_json:
        print(json.dumps([f.as_dict() for f in found], indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table("check", "member", "status", "finding", title=f"bench preflight on {socket.gethostname()}")
        for f in found:
            table.add_row(f.check, f.member, MARK.get(f.status, f.status), f.detail)
        Console().print(table)
        warnings = sum(f.status == "warning" for f in found)
        print(f"preflight: {len(errors)} error(s), {warnings} warning(s)", file=sys.stderr)
    if cfg.node_patch:
        for line in node_patch.write(cfg.node_patch, node, "preflight", node_patch.named(found, "error"),
                                     node_patch.named(found, "warning"), utc_stamp()):
            print(line, file=sys.stderr)
    if cfg.exit_codes == "nagios":
        return nagios(len(errors), sum(f.status == "warning" for f in found))
    return 1 if errors else 0
