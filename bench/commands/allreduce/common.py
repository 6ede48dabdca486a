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
        """Allocate ``count`` float32 elements holding rank + 1; return the operation (a callable) of the
        config's collective (bench.commands.allreduce.collectives)."""
        self.fill(count)
        return self.cfg.collective.operation(self)

    def fill(self, count: int) -> None:
        """The buffer: ``count`` float32 elements holding rank + 1 (and no result yet)."""
        raise NotImplementedError

    def op_allreduce(self):
        """A callable running one SUM allreduce of the buffer (its result readable by :meth:`result`)."""
        raise NotImplementedError

    def op_allgather(self):
        """A callable running one allgather of the buffer (its result readable by :meth:`result`)."""
        raise NotImplementedError

    def op_alltoall(self):
        """A callable running one all-to-all of the buffer's n blocks (its result readable by :meth:`result`)."""
        raise NotImplementedError

    def result(self):
        """The last operation's result as a numpy array (count elements; n x count for an allgather)."""
        raise NotImplementedError

    def check(self, op, count: int) -> bool:
        """Run the operation once and hold its result to what the collective must give."""
        import numpy as np

        op()
        self.sync()
        return self.cfg.collective.correct(np.asarray(self.result()), self.world_size, count)

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
