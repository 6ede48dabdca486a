"""One device alone, for bench diagnose's first phase:
``python -m bench.commands.diagnose.alone PREFIX DEVICES MODE [ARGS]``.

Started once per device of a node (an srun step of ``-n DEVICES`` tasks on that node, or ssh), it forgets
every launcher's variables (so that bench sees no outer launcher and no allocation, and runs one process of
its own), takes device number SLURM_LOCALID (or HVDBENCH_DIAGNOSE_DEVICE) as its only visible GPU, and
becomes ``bench MODE --np 1 ARGS --output PREFIX-<device>`` (diagnose's PREFIX names the node as it does).
"""

from __future__ import annotations

import os
import sys

from bench.launching import envs

LAUNCHER_PREFIXES = ("SLURM_", "SLURMD_", "PMI_", "PMIX_", "OMPI_", "HOROVOD_", "TORCHELASTIC_")
LAUNCHER_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG",
                  "HVDBENCH_LAUNCHER")


def device_index(env: dict[str, str]) -> int:
    return int(env.get("HVDBENCH_DIAGNOSE_DEVICE") or env.get("SLURM_LOCALID") or 0)


def alone_env(env: dict[str, str], devices: int) -> dict[str, str]:
    """``env`` without any launcher's variables; with more than one device per node, only this task's GPU."""
    index = device_index(env)
    out = {k: v for k, v in env.items() if not k.startswith(LAUNCHER_PREFIXES) and k not in LAUNCHER_NAMES}
    if devices > 1:
        visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d] or [str(i) for i in range(devices)]
        out["CUDA_VISIBLE_DEVICES"] = visible[index % len(visible)]
    return out


def main(argv: list[str]) -> None:
    if len(argv) < 3:
        sys.exit("usage: python -m bench.commands.diagnose.alone PREFIX DEVICES MODE [ARGS...]")
    prefix, devices, mode, *args = argv
    env = dict(os.environ)
    folder = f"{prefix}-{device_index(env)}"
    os.execve(sys.executable, [*envs.bench_command(), mode, "--np", "1", *args, "--output", folder],
              alone_env(dict(os.environ), int(devices)))


if __name__ == "__main__":
    main(sys.argv[1:])
