"""NVML (nvidia-ml-py) loaded once it is asked for: the GPU telemetry (bench.measure.telemetry), the environment
record, the preflight checks and the launchers' GPU count read the devices through it."""

from __future__ import annotations


def load_nvml():
    """The pynvml module (nvidia-ml-py), initialised; or (None, reason)."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML did not initialise: {exc}"
    return pynvml, None
