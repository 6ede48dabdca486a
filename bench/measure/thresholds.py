"""Threshold packs: the limits operators publish for a GPU model, each value with where it was read and when.

bench holds a node against its peers and against a baseline the user made; a new cluster has neither. A pack
gives the published limits for the GPU models it names (exact NVML names), used where they apply:

* ``ecc_sram_correctable_max``: SRAM correctable ECC errors, volatile or aggregate, above it: an error (preflight);
* ``ecc_dram_max``: DRAM ECC errors, correctable or not, volatile or aggregate, above it: an error (preflight);
* ``remapped_rows_uncorrectable_max``: rows remapped after uncorrectable errors above it: an error (preflight;
  below it a remapped row stays a warning);
* ``ecc_corrected_volatile_max``: corrected ECC errors since the driver loaded (all locations) above it: an error
  (preflight, soak);
* ``retired_pages_max``: pages retired for multiple single-bit errors, or for double-bit errors, above it (each
  cause on its own; GPUs before Ampere retire pages, later ones remap rows): an error (preflight, soak);
* ``allreduce_busbw_gbs_min`` at ``allreduce_bytes`` and ``allreduce_gpus``: one node's NCCL all-reduce bus
  bandwidth over all its GPUs at that size below it: an error (bench allreduce, on a run of that shape).

A pack for ``"*"`` holds every model, where no pack for its own name sets the value (Meta's GCM's defaults are such
a pack). A user's pack (``--thresholds FILE``, TOML) overrides the shipped values for the models it names, value by
value, and may name models no shipped pack has. Each value must carry its source::

    [[pack]]
    name = "our H100 fleet"
    gpus = ["NVIDIA H100 80GB HBM3"]
    [pack.values.ecc_sram_correctable_max]
    value = 5000
    source = "our acceptance runbook, 2026-11"

No shipped value lacks a source that was read: each names the file and the commit it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.errors import BenchError

FIELDS = {
    "ecc_sram_correctable_max": "SRAM correctable ECC errors (volatile or aggregate) allowed",
    "ecc_dram_max": "DRAM ECC errors, correctable or not (volatile or aggregate), allowed",
    "remapped_rows_uncorrectable_max": "rows remapped after uncorrectable errors allowed",
    "ecc_corrected_volatile_max": "corrected ECC errors since the driver loaded allowed",
    "retired_pages_max": "pages retired for one cause (multiple single-bit, or double-bit ECC errors) allowed",
    "allreduce_busbw_gbs_min": "one node's NCCL all-reduce bus bandwidth floor (GB/s)",
    "allreduce_bytes": "the message size the floor holds at (bytes)",
    "allreduce_gpus": "the GPUs (one rank each) the floor holds for",
}

# Azure's node health checks (github.com/Azure/azurehpc-health-checks, read at commit 0e0a1ac of 2026-05-01; the
# ND v5 configurations last changed in df20d06, 2025-08-20). conf/nd96isr_h100_v5.conf and nd96isr_h200_v5.conf:
# `check_gpu_ecc 20000000 10000` (customTests/azure_gpu_ecc.nhc check_ecc: DRAM uncorrected or corrected,
# volatile or aggregate, above 20000000 fails; SRAM corrected, volatile or aggregate, above 10000 fails; rows
# remapped for uncorrectable errors above 512 fails), `check_nccl_allreduce 460.0 1 16G` (H100) and
# `check_nccl_allreduce 431.0 1 16G` (H200): customTests/azure_nccl_allreduce.nhc runs all_reduce_perf with
# `-b 16G -e 16G -f 2 -g 1 -c 1` on `-np <GPUs>` of one node and fails an average bus bandwidth below it.
_AZURE = "Azure/azurehpc-health-checks@0e0a1ac (2026-05-01)"
_ECC = f"{_AZURE}: conf/nd96isr_{{}}_v5.conf check_gpu_ecc 20000000 10000; customTests/azure_gpu_ecc.nhc check_ecc"


def _azure(model: str, busbw: float) -> dict[str, Any]:
    ecc = _ECC.format(model)
    nccl = f"{_AZURE}: conf/nd96isr_{model}_v5.conf check_nccl_allreduce {busbw} 1 16G (all_reduce_perf -b 16G " \
           "-e 16G -g 1, one rank per GPU of the node's 8)"
    return {"ecc_sram_correctable_max": (10000, ecc), "ecc_dram_max": (20000000, ecc),
            "remapped_rows_uncorrectable_max": (512, f"{ecc} (rows remapped for uncorrectable errors > 512)"),
            "allreduce_busbw_gbs_min": (busbw, nccl), "allreduce_bytes": (16 * 2**30, nccl),
            "allreduce_gpus": (8, nccl)}


# Meta's GCM (github.com/facebookresearch/gcm, gcm/health_checks/checks/check_nvidia_smi.py read at commit
# ccc9129): its defaults for any GPU, `--ecc_corrected_volatile_threshold 50000000` (ecc_corrected_volatile_total:
# a volatile corrected total above it is CRITICAL) and `--gpu_retired_pages_threshold 10` (gpu_retired_pages: pages
# retired for multiple single-bit errors, or for double-bit errors, above it is CRITICAL). Its other levels are
# the operator's arguments (a temperature, the expected application clocks), no value for a model.
_GCM = "facebookresearch/gcm@ccc9129: gcm/health_checks/checks/check_nvidia_smi.py"
ALL_MODELS = "*"


@dataclass(frozen=True)
class Value:
    value: float
    source: str
    pack: str


@dataclass
class Packs:
    """The values by GPU model, each with its source and its pack."""
    by_model: dict[str, dict[str, Value]] = field(default_factory=dict)

    def add(self, name: str, gpus: list[str], values: dict[str, tuple[float, str]]) -> None:
        for gpu in gpus:
            held = self.by_model.setdefault(gpu, {})
            for key, (value, source) in values.items():
                held[key] = Value(float(value), source, name)

    def get(self, model: str | None, key: str) -> Value | None:
        """The model's own value, else the one every model is held to; None where neither pack sets it."""
        return self.by_model.get(model or "", {}).get(key) or self.by_model.get(ALL_MODELS, {}).get(key)


def shipped() -> Packs:
    packs = Packs()
    packs.add("Azure ND H100 v5 health checks", ["NVIDIA H100 80GB HBM3"], _azure("h100", 460.0))
    packs.add("Azure ND H200 v5 health checks", ["NVIDIA H200"], _azure("h200", 431.0))
    packs.add("Meta GCM health-check defaults", [ALL_MODELS], {
        "ecc_corrected_volatile_max": (50000000, f"{_GCM} --ecc_corrected_volatile_threshold default"),
        "retired_pages_max": (10, f"{_GCM} --gpu_retired_pages_threshold default")})
    return packs


def load(path: str | Path | None = None) -> Packs:
    """The shipped packs, with a user's pack file over them (value by value); each bad entry in one line."""
    packs = shipped()
    if not path:
        return packs
    import tomllib

    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise BenchError(f"cannot read the threshold pack {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise BenchError(f"threshold pack {path}: not TOML ({exc})") from None
    extra = sorted(set(data) - {"pack"})
    if extra or not isinstance(data.get("pack"), list) or not data["pack"]:
        raise BenchError(f"threshold pack {path}: one or more [[pack]] tables and nothing else"
                         + (f" (unknown: {', '.join(extra)})" if extra else ""))
    for i, pack in enumerate(data["pack"], 1):
        where = f"threshold pack {path}, pack {i} ({pack.get('name', 'unnamed')})"
        unknown = sorted(set(pack) - {"name", "gpus", "values"})
        if unknown:
            raise BenchError(f"{where}: unknown field {', '.join(unknown)} (a pack has name, gpus and values)")
        gpus = pack.get("gpus")
        if not pack.get("name") or not isinstance(gpus, list) or not gpus or not all(isinstance(g, str) for g in gpus):
            raise BenchError(f"{where}: needs a name and gpus, a list of exact NVML names (nvidia-smi -L)")
        values = {}
        for key, entry in (pack.get("values") or {}).items():
            if key not in FIELDS:
                raise BenchError(f"{where}: unknown value {key} (known: {', '.join(FIELDS)})")
            if not isinstance(entry, dict) or set(entry) != {"value", "source"}:
                raise BenchError(f"{where}: {key} needs exactly a value and its source")
            if isinstance(entry["value"], bool) or not isinstance(entry["value"], (int, float)) or entry["value"] < 0:
                raise BenchError(f"{where}: {key}'s value must be a number >= 0")
            if not isinstance(entry["source"], str) or not entry["source"].strip():
                raise BenchError(f"{where}: {key} has no source (say where the value was read, and when)")
            values[key] = (entry["value"], entry["source"])
        if not values:
            raise BenchError(f"{where}: no values")
        packs.add(pack["name"], gpus, values)
    return packs


def cited(v: Value) -> str:
    return f"{v.pack}: {v.source}"
