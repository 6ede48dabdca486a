"""The distributed layer below the modes and ``bench allreduce``: everything about the group of processes, once.

==================  ==========================================================================
module              what it owns
==================  ==========================================================================
torchdist           torch.distributed: device pinning and the CPU thread share, the TCPStore
                    rendezvous, the process group (NCCL on GPU, Gloo on CPU), allgather, shutdown
hvdist              Horovod, either framework: import, host-name check, ``hvd.init``, the
                    environment record (bench.launching.horovod_gloo spawns its ranks)
tfdist              tf.distribute: device pinning and TF's CPU pool, TF_CONFIG for spawned workers,
                    the cluster resolver (TF_CONFIG or Slurm), the bounded MultiWorkerMirroredStrategy
                    rendezvous, allgather through the strategy
==================  ==========================================================================

Modes (bench.modes) build training on top of these; allreduce backends (bench.commands.allreduce) build their
collective on the same calls, so a rendezvous or pinning fix lands in both. Nothing here imports a mode.
"""
