"""What every allreduce backend provides (bench.allreduce.measure drives it)."""

from __future__ import annotations

import time
from typing import Any


class Comm:
    """One rank's collective. Subclasses fill the buffer, run the operation and synchronise."""

    rank: int
    world_size: int

    def setup(self) -> None: ...

    def prepare(self, count: int):
        """Allocate ``count`` float32 elements holding rank + 1; return the operation (a callable)."""
        raise NotImplementedError

    def result_equals(self, value: float) -> bool:
        """Whether every element of the last operation's result equals ``value``."""
        raise NotImplementedError

    def check(self, op, count: int) -> bool:
        """One SUM of rank + 1 over n ranks must give n (n + 1) / 2 everywhere (exact in float32)."""
        op()
        self.sync()
        n = self.world_size
        return self.result_equals(n * (n + 1) / 2)

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
