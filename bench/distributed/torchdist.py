"""torch.distributed for the PyTorch modes and the ``torch`` / ``horovod-torch`` allreduce backends."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from bench.errors import BenchError
from bench.launching import envs
from bench.launching.detect import LaunchInfo
from bench.launching.supervise import cpu_thread_share
from bench.vocabulary import Device

COLLECTIVE_TIMEOUT = timedelta(minutes=10)


def gpu_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def use_cuda(device: Device) -> bool:
    """Whether a run asking for ``device`` lands on CUDA (auto: when PyTorch sees a GPU)."""
    if device == Device.cuda and gpu_count() == 0:
        raise BenchError("--device cuda was asked for, but no CUDA GPU is visible to PyTorch")
    if device == Device.auto and gpu_count() == 0:
        envs.no_gpu("PyTorch", envs.torch_why(torch.version.cuda))
    return device == Device.cuda or (device == Device.auto and gpu_count() > 0)


def pin(cuda: bool, launch: LaunchInfo) -> torch.device:
    """This rank's device: local rank r takes GPU r mod the count; on the CPU, the rank's core share
    (unless the user set OMP_NUM_THREADS)."""
    if cuda:
        if not torch.cuda.is_available():
            raise BenchError(f"rank {launch.rank}: no CUDA GPU visible")
        index = launch.local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(cpu_thread_share(launch.local_world_size))
    return torch.device("cpu")


def init_group(launch: LaunchInfo, device: torch.device, rendezvous_timeout: float) -> str:
    """torch.distributed's default group over a TCPStore at MASTER_ADDR:MASTER_PORT; returns the backend
    (NCCL on GPU, Gloo on CPU)."""
    addr, port = launch.master_addr, launch.master_port
    if not addr or not port:
        raise BenchError(f"{launch.launcher} did not provide MASTER_ADDR and MASTER_PORT "
                         "for the torch.distributed rendezvous; set them")
    timeout = timedelta(seconds=rendezvous_timeout)
    try:
        store = dist.TCPStore(addr, port, launch.world_size, is_master=launch.rank == 0, timeout=timeout,
                              wait_for_workers=True)
    except (RuntimeError, dist.DistError) as exc:
        raise BenchError(f"rendezvous at {addr}:{port} failed or timed out after {rendezvous_timeout:g} s "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from None
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, store=store, rank=launch.rank, world_size=launch.world_size,
                            timeout=COLLECTIVE_TIMEOUT, **kwargs)
    return backend


def allgather(obj: Any) -> list[Any]:
    """Any picklable object from every rank of the default group."""
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def close_group() -> None:
    """Destroy the default group once no collective is in flight.

    Gloo's worker threads release a finished collective's tensors under the GIL; if the main thread
    drops the last reference to the group meanwhile (holding the GIL), the two deadlock. A barrier and
    a short GIL-free pause let those threads finish first.
    """
    if dist.is_initialized():
        dist.barrier()
        time.sleep(0.1)
        dist.destroy_process_group()
