"""What every allreduce backend provides (bench.commands.allreduce.measure drives it)."""

from __future__ import annotations

import time
from typing import Any


class Comm:
    """One rank's collective. Subclasses fill the buffer, run the operation and synchronise."""

    rank: int
    world_size: int

    def setup(self) -> None: ...

    def prepare(self, count: int):
        """Allocate ``count`` float32 elements holding rank + 1; return the operation (a callable): the config's
        ``op``, an in-place SUM allreduce or an allgather."""
        raise NotImplementedError

    def result(self):
        """The last operation's result as a numpy array (count elements; n x count for an allgather)."""
        raise NotImplementedError

    def check(self, op, count: int) -> bool:
        """One SUM of rank + 1 over n ranks must give n (n + 1) / 2 everywhere (exact in float32); one
        allgather must give block r = r + 1."""
        import numpy as np

        op()
        self.sync()
        n = self.world_size
        out = np.asarray(self.result())
        if self.cfg.op == "allgather":
            expected = np.repeat(np.arange(1, n + 1, dtype=np.float32), count)
            return out.shape == expected.shape and bool((out == expected).all())
        return bool((out == n * (n + 1) / 2).all())

    def zero(self) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        """Wait for the device (a no-op where the operation is synchronous)."""

    def barrier(self) -> None:
        self.allgather(None)

    def clock(self) -> float:
        return time.perf_counter()

    def allgather(self, obj: Any) -> list[Any]:
        raise NotImplementedError

    def release(self) -> None:
        """Free the size's buffers before the next, larger one."""

    def environment(self) -> dict[str, Any]:
        return {}

    def teardown(self) -> None: ...
