"""The distributed layer below the modes and ``bench allreduce``: everything about the group of processes, once.

==================  ==========================================================================
module              what it owns
==================  ==========================================================================
bench.distributed.torchdist torch.distributed: device pinning and the CPU thread share, the TCPStore
                    rendezvous, the process group (NCCL on GPU, Gloo on CPU), allgather, shutdown
bench.distributed.hvdist      Horovod, either framework: import, host-name check, ``hvd.init``, spawn with the
                    Gloo controller, the environment record
bench.distributed.tfdist   tf.distribute: device pinning and TF's CPU pool, TF_CONFIG for spawned workers,
                    the cluster resolver (TF_CONFIG or Slurm), the bounded MultiWorkerMirroredStrategy
                    rendezvous, allgather through the strategy
==================  ==========================================================================

Modes (bench.modes) build training on top of these; allreduce backends (bench.allreduce) build their
collective on the same calls, so a rendezvous or pinning fix lands in both. Nothing here imports a mode.

CPU thread share: N ranks on one node each using every core oversubscribe it and measure contention,
not training. The spawner gives each rank ``cores // ranks`` threads (OMP_NUM_THREADS, marked with
HVDBENCH_THREAD_SHARE), as torchrun does; PyTorch ranks use that share. TensorFlow ranks keep TF's own
pool unless the user set OMP_NUM_THREADS (see bench.distributed.tfdist.set_cpu_threads for why).
"""

from __future__ import annotations

import os


def cpu_thread_share(local_world_size: int) -> int:
    """Threads per rank when ``local_world_size`` ranks share this node's cores."""
    return max(1, (os.cpu_count() or 1) // max(1, local_world_size))
