"""tf.distribute for the TensorFlow modes and the ``tf`` / ``horovod-tf`` allreduce backends."""

from __future__ import annotations

import json
import os
import pickle
from typing import Any

import numpy as np

from bench.errors import BenchError
from bench.launching import envs
from bench.launching.detect import LaunchInfo, parse_tf_config
from bench.launching.supervise import THREAD_SHARE_ENV, free_port
from bench.measure.watchdog import deadline
from bench.tfutil import import_tf, quiet_startup
from bench.vocabulary import Device


def gpus() -> list:
    tf = import_tf()[0]
    with quiet_startup():  # the CUDA build's first device query logs cuInit's failure where no GPU is
        return tf.config.list_physical_devices("GPU")


def use_gpu(device: Device) -> bool:
    """Whether a run asking for ``device`` lands on a GPU (auto: when TensorFlow sees one)."""
    found = gpus()
    if device == Device.cuda and not found:
        raise BenchError("--device cuda was asked for, but no GPU is visible to TensorFlow")
    if device == Device.auto and not found:
        tf = import_tf()[0]
        envs.no_gpu("TensorFlow", envs.TF_CPU_BUILD if not tf.test.is_built_with_cuda() else
                    "its CUDA 12 build finds no GPU it can use (nvidia-smi shows the driver; CUDA 12 needs "
                    f"{envs.MIN_DRIVER_CUDA12} or newer), or CUDA_VISIBLE_DEVICES names none")
    return device == Device.cuda or (device == Device.auto and bool(found))


def pin(gpu: bool, launch: LaunchInfo, which: str = "one") -> list:
    """Make TensorFlow see this rank's devices: ``which`` 'one' (the local rank's GPU), 'all' (every GPU, for
    MirroredStrategy) or 'none'; without a GPU, the CPU with :func:`set_cpu_threads`. Returns the GPUs chosen."""
    tf = import_tf()[0]
    found = gpus()
    if gpu and which != "none":
        if not found:
            raise BenchError(f"rank {launch.rank}: no GPU visible to TensorFlow")
        chosen = [found[launch.local_rank % len(found)]] if which == "one" else found
        tf.config.set_visible_devices(chosen, "GPU")
        for g in chosen:
            tf.config.experimental.set_memory_growth(g, True)
        return chosen
    tf.config.set_visible_devices([], "GPU")
    set_cpu_threads(tf)
    return []


def set_cpu_threads(tf) -> None:
    """TensorFlow's intra-op pool on CPU: the user's OMP_NUM_THREADS when they set one, else TF's default
    (every core), also when the spawner gave each rank a core share for PyTorch's sake.

    This is what a plain TF script gets, Horovod's own tensorflow2_synthetic_benchmark.py among them, and
    several ranks' default pools share the cores without harm: TF's Eigen pool blocks rather than spins.
    Measured here (2 cores, VGG-16 224x224, tf-horovod at 2 ranks): with one thread per rank bench ran
    behind that script at batch 4 (0.756 vs 0.794 img/s per rank); with the default pool at 0.779 vs 0.770;
    at batch 2 the two pools measured alike within this machine's noise. PyTorch's OpenMP threads spin
    instead, and one share per rank is far faster there (bench.distributed.torchdist.pin; docs/measuring.md,
    "Against Horovod's own scripts").
    """
    value = os.environ.get("OMP_NUM_THREADS")
    if value and os.environ.get(THREAD_SHARE_ENV) != value:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(max(1, int(value)))
        except ValueError:
            raise BenchError(f"OMP_NUM_THREADS={value!r} is not a number of threads") from None


def task_config(cluster: dict, task_type: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def multiworker_envs(np_: int) -> list[dict[str, str]]:
    """Rank variables and TF_CONFIG for ``np_`` MultiWorkerMirroredStrategy workers on this host."""
    cluster = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(np_)]}
    return [{"RANK": str(r), "WORLD_SIZE": str(np_), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(np_),
             "TF_CONFIG": task_config(cluster, "worker", r)} for r in range(np_)]


def cluster_resolver(launch: LaunchInfo, world_size: int):
    """MultiWorkerMirroredStrategy's cluster: from TF_CONFIG, or from Slurm under srun."""
    tf = import_tf()[0]
    if "TF_CONFIG" in os.environ:
        parse_tf_config(os.environ["TF_CONFIG"])  # a clear error before TF's own
        return tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if launch.launcher == "srun":
        return slurm_resolver(launch, {"worker": world_size})
    raise BenchError("tf.distribute's multi-worker collectives need TF_CONFIG (bench writes it when it spawns "
                     "the ranks) or srun")


def slurm_resolver(launch: LaunchInfo, jobs: dict[str, int]):
    """TensorFlow's own SlurmClusterResolver over this srun step: hosts from the step's node list (scontrol),
    one port per task on a node from the step's base port; the tasks take the jobs in sorted order of
    their names (chief, ps, worker), SLURM_PROCID by SLURM_PROCID.

    It places tasks on hosts in node-list order, as Slurm's default block distribution does; under another
    distribution its addresses would name the wrong hosts, so that is refused. bench pins GPUs itself (local
    rank -> device; auto_set_gpu=False), so the resolver's GPU bookkeeping is unused; it cannot express zero
    GPUs per task, so it is told one per task and as many per node as the step has tasks.
    """
    tf = import_tf()[0]
    distribution = os.environ.get("SLURM_DISTRIBUTION", "block")
    if not distribution.startswith("block"):
        raise BenchError(f"tf.distribute under srun needs Slurm's block task distribution (got "
                         f"--distribution={distribution}): TensorFlow's SlurmClusterResolver places tasks in "
                         "node-list order")
    return tf.distribute.cluster_resolver.SlurmClusterResolver(
        jobs=jobs, port_base=launch.master_port or 8888, gpus_per_node=max(1, launch.world_size),
        gpus_per_task=1, auto_set_gpu=False)


def ps_tf_config(launch: LaunchInfo, num_ps: int) -> str:
    """TF_CONFIG for --strategy ps under srun: task 0 the chief (the coordinator), the next ``num_ps`` the
    parameter servers, the rest the workers."""
    workers = launch.world_size - 1 - num_ps
    if workers < 1:
        raise BenchError(f"--strategy ps under srun runs a chief, {num_ps} parameter server(s) and at least one "
                         f"worker, one task each: srun -n {num_ps + 2} or more (got {launch.world_size})")
    resolver = slurm_resolver(launch, {"chief": 1, "ps": num_ps, "worker": workers})
    cluster = resolver.cluster_spec().as_dict()
    return task_config(cluster, resolver.task_type, resolver.task_id)


def multiworker(launch: LaunchInfo, gpu: bool, timeout_s: float):
    """(MultiWorkerMirroredStrategy over this job's ranks, its collective implementation: NCCL on GPU, RING on
    CPU). The rendezvous is bounded by ``timeout_s`` and SIGTERM ends the process again afterwards.

    The strategy's creation waits, inside TensorFlow's C++ code and holding the GIL, for every worker of the
    cluster; a worker that never comes makes it wait forever, so bench.measure.watchdog.deadline ends the process
    after ``timeout_s`` (``--rendezvous-timeout``) with one line naming the cluster. Creating the strategy
    also starts TensorFlow's coordination service, whose preemption notifier catches SIGTERM (to let a
    training loop checkpoint). bench has no checkpoint to save, and a caught SIGTERM kept each worker alive
    until its spawner's SIGKILL 10 s later, or until Slurm's KillWait after scancel: the default action is
    restored once the strategy exists, so a worker ends at once; its peers' collectives then fail.
    """
    import signal

    tf = import_tf()[0]
    impl = tf.distribute.experimental.CommunicationImplementation
    collectives = "NCCL" if gpu else "RING"
    options = tf.distribute.experimental.CommunicationOptions(implementation=impl.NCCL if gpu else impl.RING)
    resolver = cluster_resolver(launch, launch.world_size)
    spec = resolver.cluster_spec().as_dict()
    workers = ", ".join(spec.get("chief", []) + spec.get("worker", []))
    with deadline(timeout_s, f"tf.distribute rendezvous of the workers ({workers}) did not complete within "
                             f"{timeout_s:g} s (--rendezvous-timeout): a worker did not start, or cannot be reached "
                             "at its address", launch.rank):
        strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver, communication_options=options)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if strategy.num_replicas_in_sync != launch.world_size:
        raise BenchError(f"MultiWorkerMirroredStrategy has {strategy.num_replicas_in_sync} replicas, "
                         f"the launcher started {launch.world_size} ranks")
    return strategy, collectives


def allgather(strategy, obj: Any) -> list[Any]:
    """Any picklable object from every worker, through a MultiWorkerMirroredStrategy's own all-gather."""
    tf = import_tf()[0]

    def gather(array: np.ndarray) -> np.ndarray:
        tensor = tf.constant(array)
        values = strategy.experimental_distribute_values_from_function(lambda ctx: tensor)
        return strategy.gather(values, axis=0).numpy()

    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8).astype(np.int32)
    lengths = gather(np.array([payload.size], np.int32))
    # padded to a power of two: the gather is traced once per such width, not once per payload size
    padded = np.zeros([1, 1 << (int(lengths.max()) - 1).bit_length()], np.int32)
    padded[0, :payload.size] = payload
    rows = gather(padded)
    return [pickle.loads(rows[i, :lengths[i]].astype(np.uint8).tobytes()) for i in range(len(lengths))]
