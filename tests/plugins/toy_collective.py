"""A throwaway collective, registered from outside bench (HVDBENCH_PLUGINS=toy_collective): the registry's test that
a new collective is this one file (tests/multiproc/test_registry.py).

``broadcast``: rank 0's buffer to every rank, through the torch backend (torch.distributed.broadcast); nccl-tests
counts its algbw as the bytes over the time and its bus factor as 1.
"""

from __future__ import annotations

from typing import Any

from bench.commands.allreduce.collectives import Collective, register


class Broadcast(Collective):
    def algbw_bytes(self, nbytes: int, n: int) -> int:
        return nbytes

    def bus_factor(self, n: int) -> float:
        return 1.0

    def correct(self, out: Any, n: int, count: int) -> bool:
        return out.shape == (count,) and bool((out == 1).all())  # rank 0 holds 1

    def operation(self, comm: Any):
        import torch.distributed as dist

        comm.out = comm.buf  # in place
        return lambda: dist.broadcast(comm.buf, src=0)


register(Broadcast("broadcast", {
    "time_s": "per broadcast: median over samples of the ranks' mean sample time / iters",
    "algbw_GBps": "bytes / time_s / 1e9",
    "busbw_GBps": "algbw (nccl-tests' factor 1)",
    "correct": "every rank's buffer holds rank 0's value, 1",
}, backends_without=("horovod-torch", "horovod-tf", "tf")))
