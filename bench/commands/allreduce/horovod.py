"""What the Horovod allreduce backends share (``horovod-torch``, ``horovod-tf``): start-up and records.

NCCL on GPU (Horovod built with HOROVOD_GPU_OPERATIONS=NCCL), Gloo or MPI on CPU. Started like the
Horovod modes: self-spawned with the Gloo controller, or under horovodrun, mpirun or srun --mpi=pmix.
Imports no framework: each backend module brings its own buffer.
"""

from __future__ import annotations

from typing import Any

from bench.commands.allreduce.common import Comm
from bench.distributed import hvdist
from bench.launching import horovod_gloo
from bench.records import env


def spawn_with(framework: str, cfg) -> None:
    """A Horovod backend's spawn: Horovod for ``framework`` checked first (one line where it is missing)."""
    hvdist.import_hvd(framework, f"allreduce --backend {cfg.backend}")
    horovod_gloo.spawn("allreduce", cfg.np, cfg.to_json(), cfg.rendezvous_timeout)


class HorovodComm(Comm):
    """hvd.init, Horovod's allgather and shutdown; subclasses set ``framework`` and ``on_gpu``."""
    framework = "torch"
    on_gpu = False

    def setup(self) -> None:
        self.hvd = hvdist.import_hvd(self.framework, f"allreduce --backend {self.cfg.backend}")
        hvdist.init(self.hvd, self.rank, self.world_size)

    def allgather(self, obj: Any) -> list[Any]:
        return hvdist.allgather_object(self.hvd, obj)

    # Horovod's allgather and all-to-all return a new tensor, from either framework alike (self.buf: the
    # framework's tensor, made by the subclass's fill).
    def op_alltoall(self):
        def exchange():
            self.out = self.hvd.alltoall(self.buf, name="bench.alltoall")
        return exchange

    def op_allgather(self):
        def gather():
            self.out = self.hvd.allgather(self.buf, name="bench.allgather")
        return gather

    def environment(self) -> dict[str, Any]:
        info = hvdist.environment(self.hvd, self.framework, self.on_gpu)
        controller = info["distribution"]["controller"]
        return {**env.base(), **info, "library": "horovod", "device": "cuda" if self.on_gpu else "cpu",
                "transport": f"horovod {'nccl' if self.on_gpu and info['distribution']['nccl'] else controller}"}

    def teardown(self) -> None:
        self.hvd.shutdown()
