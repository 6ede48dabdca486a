"""The collectives ``bench allreduce`` measures, one object each (as nccl-tests defines them): the bytes its
algorithm bandwidth counts, its bus factor, the result a correct run gives, and which call of a backend runs it.

Per rank a buffer of S bytes (float32) holding rank + 1; n ranks; t the time of one operation::

    allreduce   algbw = S / t       busbw = algbw * 2 (n - 1) / n   (a ring moves 2 (n - 1) / n * S per link)
                correct: every element of the SUM is n (n + 1) / 2 (exact in float32)
    allgather   algbw = n S / t     busbw = algbw * (n - 1) / n     (every link carries the other ranks' S)
                correct: block r of the gathered n S holds r + 1, on every rank
    alltoall    algbw = S / t       busbw = algbw * (n - 1) / n     (each rank keeps 1/n of its S, sends the rest)
                correct: rank r's block j (S / n bytes) is what rank j sent it: j + 1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Collective:
    name: str
    definitions: dict[str, str]
    backends_without: tuple[str, ...] = ()  # bench allreduce backends whose library has no such collective

    def elements(self, count: int, n: int) -> int:
        """The float32 elements one rank's buffer holds for a size of ``count`` (all-to-all: whole blocks)."""
        return count

    def algbw_bytes(self, nbytes: int, n: int) -> int:
        """The bytes algbw counts for ``nbytes`` per rank."""
        raise NotImplementedError

    def bus_factor(self, n: int) -> float:
        raise NotImplementedError

    def bandwidths(self, nbytes: int, seconds: float, n: int) -> tuple[float, float]:
        """(algbw, busbw) in GB/s (1e9 bytes) for one operation on ``nbytes`` per rank taking ``seconds``."""
        algbw = self.algbw_bytes(nbytes, n) / seconds / 1e9
        return algbw, algbw * self.bus_factor(n)

    def correct(self, out: Any, n: int, count: int) -> bool:
        """Whether ``out`` (a numpy array) is what this collective gives over ``n`` ranks of ``count``
        elements holding rank + 1."""
        raise NotImplementedError

    def operation(self, comm: Any):
        """The callable that runs this collective through ``comm`` (a bench.commands.allreduce.common.Comm)."""
        raise NotImplementedError


class Allreduce(Collective):
    def algbw_bytes(self, nbytes: int, n: int) -> int:
        return nbytes

    def bus_factor(self, n: int) -> float:
        return 2 * (n - 1) / n

    def correct(self, out: Any, n: int, count: int) -> bool:
        return out.shape == (count,) and bool((out == n * (n + 1) / 2).all())

    def operation(self, comm: Any):
        return comm.op_allreduce()


class Allgather(Collective):
    def algbw_bytes(self, nbytes: int, n: int) -> int:
        return n * nbytes

    def bus_factor(self, n: int) -> float:
        return (n - 1) / n

    def correct(self, out: Any, n: int, count: int) -> bool:
        import numpy as np

        expected = np.repeat(np.arange(1, n + 1, dtype=np.float32), count)
        return out.shape == expected.shape and bool((out == expected).all())

    def operation(self, comm: Any):
        return comm.op_allgather()


class Alltoall(Collective):
    """Every rank sends block j of its buffer to rank j (a sharded table's lookups and rows travel so)."""

    def elements(self, count: int, n: int) -> int:
        return count - count % n

    def algbw_bytes(self, nbytes: int, n: int) -> int:
        return nbytes

    def bus_factor(self, n: int) -> float:
        return (n - 1) / n

    def correct(self, out: Any, n: int, count: int) -> bool:
        import numpy as np

        expected = np.repeat(np.arange(1, n + 1, dtype=np.float32), count // n)
        return out.shape == expected.shape and bool((out == expected).all())

    def operation(self, comm: Any):
        return comm.op_alltoall()


ALLREDUCE = Allreduce("allreduce", {
    "time_s": "per allreduce: median over samples of the ranks' mean sample time / iters (nccl-tests' -a 1)",
    "algbw_GBps": "bytes / time_s / 1e9",
    "busbw_GBps": "algbw * 2 (n - 1) / n (nccl-tests)",
    "correct": "rank r contributes r + 1; every element of the SUM equals n (n + 1) / 2",
})
ALLGATHER = Allgather("allgather", {
    "time_s": "per allgather: median over samples of the ranks' mean sample time / iters (nccl-tests' -a 1)",
    "algbw_GBps": "n x bytes (the gathered size) / time_s / 1e9",
    "busbw_GBps": "algbw * (n - 1) / n (nccl-tests)",
    "correct": "rank r contributes bytes holding r + 1; block r of every rank's result holds r + 1",
})
ALLTOALL = Alltoall("alltoall", {
    "time_s": "per all-to-all: median over samples of the ranks' mean sample time / iters (nccl-tests' -a 1)",
    "algbw_GBps": "bytes (each rank's buffer, n blocks) / time_s / 1e9",
    "busbw_GBps": "algbw * (n - 1) / n (nccl-tests)",
    "correct": "rank r sends r + 1 in every block; block j of every rank's result holds j + 1",
}, backends_without=("tf",))  # tf.distribute's replica context has no all-to-all
COLLECTIVES: dict[str, Collective] = {}


def register(collective: Collective) -> Collective:
    """Add a collective (``bench allreduce --op NAME``); another package does this from a plugin (bench.plugins).
    Its ``operation`` gives the call that runs it through a backend's Comm; ``backends_without`` names the backends
    that have none (refused in one line)."""
    COLLECTIVES[collective.name] = collective
    return collective


for _collective in (ALLREDUCE, ALLGATHER, ALLTOALL):
    register(_collective)
