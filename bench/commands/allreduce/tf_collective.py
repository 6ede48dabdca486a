"""allreduce through tf.distribute: MultiWorkerMirroredStrategy's all-reduce (NCCL on GPU, RING on CPU).

One compiled function per size runs ``ReplicaContext.all_reduce(SUM, buffer)`` on the worker's one
replica, as tf-native multiworker's gradient aggregation does. TF_CONFIG comes from the spawner, the
user or Slurm, as for tf-native.
"""

from __future__ import annotations

from typing import Any

from bench.commands.allreduce.common import Comm
from bench.distributed import tfdist
from bench.launching.detect import LaunchInfo
from bench.launching.supervise import spawn as spawn_processes
from bench.records import env
from bench.tfutil import import_tf


def default_np(cfg) -> int:
    return len(tfdist.gpus()) if tfdist.use_gpu(cfg.device) else 2


def pin_device(cfg, launch: LaunchInfo):
    """(tf, device name): the local rank's GPU, or the CPU (bench.distributed.tfdist.pin)."""
    chosen = tfdist.pin(tfdist.use_gpu(cfg.device), launch)
    return import_tf()[0], "/gpu:0" if chosen else "/cpu:0"


def spawn(cfg) -> None:
    spawn_processes(["allreduce"], tfdist.multiworker_envs(cfg.np), cfg.to_json())


def make(cfg, launch: LaunchInfo) -> Comm:
    return TFComm(cfg, launch)


class TFComm(Comm):
    def __init__(self, cfg, launch: LaunchInfo) -> None:
        self.cfg, self.launch = cfg, launch
        self.rank, self.world_size = launch.rank, launch.world_size

    def setup(self) -> None:
        self.tf, self.device = pin_device(self.cfg, self.launch)
        self.strategy, self.collectives = tfdist.multiworker(self.launch, self.device.startswith("/gpu"),
                                                             self.cfg.rendezvous_timeout)

    def fill(self, count: int) -> None:
        with self.tf.device(self.device):
            self.buf = self.tf.Variable(self.tf.fill([count], self.tf.constant(self.rank + 1, self.tf.float32)),
                                        trainable=False)
        self.out = None

    def op_allreduce(self):
        tf = self.tf
        return self._compiled(lambda ctx: ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(self.buf)))

    def op_allgather(self):
        tf = self.tf
        return self._compiled(lambda ctx: ctx.all_gather(tf.identity(self.buf), axis=0))

    def _compiled(self, collective):
        """One compiled function per size running ``collective`` on the worker's replica context."""
        tf, strategy = self.tf, self.strategy

        @tf.function
        def run():
            return strategy.run(lambda: collective(tf.distribute.get_replica_context()))

        def op():
            self.out = run()
        return op

    def result(self):
        return self._local(self.out).numpy()

    def _local(self, value):
        return self.strategy.experimental_local_results(value)[0]

    def zero(self) -> None:
        self.buf.assign(self.tf.zeros_like(self.buf))

    def sync(self) -> None:
        if self.out is not None:
            self._local(self.out)[:1].numpy()

    def allgather(self, obj: Any) -> list[Any]:
        return tfdist.allgather(self.strategy, obj)

    def release(self) -> None:
        self.buf = self.out = None

    def environment(self) -> dict[str, Any]:
        return {**env.base(), "tensorflow": env.tf_info(), "library": "tf.distribute",
                "strategy": "MultiWorkerMirroredStrategy", "transport": f"tf.distribute {self.collectives}",
                "device": self.device}
