"""allreduce through tf.distribute: MultiWorkerMirroredStrategy's all-reduce (NCCL on GPU, RING on CPU).

One compiled function per size runs ``ReplicaContext.all_reduce(SUM, buffer)`` on the worker's one
replica, as tf-native multiworker's gradient aggregation does. TF_CONFIG comes from the spawner, the
user or Slurm, as for tf-native.
"""

from __future__ import annotations

from typing import Any

from bench import env
from bench.allreduce.common import Comm
from bench.config import Device
from bench.errors import BenchError
from bench.launch import LaunchInfo
from bench.launch import spawn as spawn_processes
from bench.tfutil import multiworker_strategy


def _tf():
    from bench.tfutil import import_tf

    return import_tf()[0]


def use_gpu(cfg) -> bool:
    gpus = _tf().config.list_physical_devices("GPU")
    if cfg.device == Device.cuda and not gpus:
        raise BenchError("--device cuda was asked for, but no GPU is visible to TensorFlow")
    return cfg.device == Device.cuda or (cfg.device == Device.auto and bool(gpus))


def default_np(cfg) -> int:
    return len(_tf().config.list_physical_devices("GPU")) if use_gpu(cfg) else 2


def pin_device(cfg, launch: LaunchInfo):
    """(tf, device name): the local rank's GPU, or the CPU with the rank's share of the cores."""
    tf = _tf()
    gpus = tf.config.list_physical_devices("GPU")
    if use_gpu(cfg):
        chosen = gpus[launch.local_rank % len(gpus)]
        tf.config.set_visible_devices([chosen], "GPU")
        tf.config.experimental.set_memory_growth(chosen, True)
        return tf, "/gpu:0"
    tf.config.set_visible_devices([], "GPU")
    from bench.tfutil import set_cpu_threads

    set_cpu_threads(tf)
    return tf, "/cpu:0"


def spawn(cfg) -> None:
    from bench.modes.tf_native import multiworker_envs

    spawn_processes(["allreduce"], multiworker_envs(cfg.np), cfg.to_json())


def make(cfg, launch: LaunchInfo) -> Comm:
    return TFComm(cfg, launch)


class TFComm(Comm):
    def __init__(self, cfg, launch: LaunchInfo) -> None:
        self.cfg, self.launch = cfg, launch
        self.rank, self.world_size = launch.rank, launch.world_size

    def setup(self) -> None:
        from bench.modes.tf_native import cluster_resolver

        tf, self.device = pin_device(self.cfg, self.launch)
        self.tf = tf
        impl = tf.distribute.experimental.CommunicationImplementation
        self.collectives = "NCCL" if self.device.startswith("/gpu") else "RING"
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=impl.NCCL if self.collectives == "NCCL" else impl.RING)
        self.strategy = multiworker_strategy(tf, cluster_resolver(self.launch, self.world_size), options, self.rank,
                                             self.cfg.rendezvous_timeout)
        if self.strategy.num_replicas_in_sync != self.world_size:
            raise BenchError(f"MultiWorkerMirroredStrategy has {self.strategy.num_replicas_in_sync} replicas, "
                             f"the launcher started {self.world_size} ranks")

    def prepare(self, count: int):
        tf, strategy = self.tf, self.strategy
        with tf.device(self.device):
            self.buf = tf.Variable(tf.fill([count], tf.constant(self.rank + 1, tf.float32)), trainable=False)
        self.out = None

        @tf.function
        def reduce():
            def replica_fn():
                return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(self.buf))
            return strategy.run(replica_fn)

        def op():
            self.out = reduce()
        return op

    def result_equals(self, value: float) -> bool:
        return bool(self.tf.reduce_all(self.tf.equal(self._local(self.out), value)).numpy())

    def _local(self, value):
        return self.strategy.experimental_local_results(value)[0]

    def zero(self) -> None:
        self.buf.assign(self.tf.zeros_like(self.buf))

    def sync(self) -> None:
        if self.out is not None:
            self._local(self.out)[:1].numpy()

    def allgather(self, obj: Any) -> list[Any]:
        from bench.modes.tf_native import strategy_allgather

        return strategy_allgather(self.strategy, obj)

    def release(self) -> None:
        self.buf = self.out = None

    def environment(self) -> dict[str, Any]:
        return {**env.base(), "tensorflow": env.tf_info(), "library": "tf.distribute",
                "strategy": "MultiWorkerMirroredStrategy", "transport": f"tf.distribute {self.collectives}",
                "device": self.device}
