"""Bytes one training step moves between processes: computed from the shapes, and measured.

Computed, per step, summed over every process that sends (n ranks, W = n workers):

    ring allreduce of D bytes       each rank sends 2(n-1)/n x D         total  2(n-1) x D
    allgather of S bytes per rank   each rank's S reaches the n-1 others  total  n(n-1) x S
    parameter server                each worker pulls the dense variables and the embedding rows it looks
                                    up, and pushes its gradient           total  W x (pull + push)
                                    untied: pull = 4(P - Vd) + r x 4d, push = D + S;  tied: pull = push = 4P
    hybrid (torch-hybrid)           the table sharded row-wise over the n ranks; a rank's r lookups go to
                                    their owners ((n-1)/n of them to another rank, for ids spread evenly
                                    over the rows): the ids out (i each), the rows back (4d), in the
                                    backward pass the rows' gradients out (4d); the rest allreduced
                                                                          total  (n-1) x r (i + 8d) + 2(n-1) x D

P: the parameters; D: 4 bytes per parameter reduced densely (2 with --fp16-allreduce, which Horovod and DDP
apply to dense gradients only). With --sparse-embeddings and without --sparse-as-dense the embedding (V x d:
vocabulary x d_model) leaves the dense part and travels as rows: S = r x (4d + i), r = 2 x batch x seq_len
lookups per rank and step (the source and the target read the same embedding; repeated ids counted each time,
an upper bound where a library merges them; the hybrid's lengths, 4 bytes per sample and feature, are left
out), i = the index size (PyTorch: int64, 8 bytes; TensorFlow's
IndexedSlices: int32, 4). Allgather-based reductions (Horovod's sparse path, Gloo's sparse allreduce under
DDP, tf.distribute's collective for IndexedSlices) gather every rank's rows and indices; each rank then sums
them.

Measured: every network interface's transmit counter of the host (/proc/net/dev; loopback included,
which is how ranks on one host talk) between the start and the end of the timed windows, divided by the
timed steps. Each host's local rank 0 reads its own; the hosts' figures add. Everything the host sent is
in it (TCP/IP headers: under 1 % at loopback's 64 KiB MTU; the collectives' small size exchanges; any
other program's traffic), so it checks the computed figure rather than equalling it.

The check holds only where the exchange goes through the hosts' network stack: Gloo and MPI over TCP (every CPU
run). On GPUs NCCL carries it over NVLink, PCIe peer-to-peer, shared memory or InfiniBand/RoCE RDMA, none of
which /proc/net/dev counts, so a GPU run's reading is kept but marked ``comparable: false`` (with the reason),
and no ratio to the computed figure is drawn from it; unless NCCL was told to use sockets for everything
(NCCL_NET=Socket with NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from bench.measure.tracker import Ranks, Tracker, register
from bench.models import model
from bench.modes import mode_label, variant
from bench.typed import Open

if TYPE_CHECKING:
    from bench.measure.raw import RankRecord


class ComputedTraffic(Open):
    """Bytes one step moves between processes, by path, from the model's shapes (bench.measure.traffic)."""
    exchange: str = Field("?", description="collective, hybrid, ps, or none (one process)")
    bytes_per_step: int = 0
    ranks: int | None = None
    dense_bytes: int | None = None
    sparse_bytes_per_rank: int = 0
    rows_per_rank: int | None = None
    allreduce_bytes: int | None = None
    allgather_bytes: int | None = None
    alltoall_bytes_per_rank: int | None = None
    alltoall_bytes: int | None = None
    pull_bytes_per_worker: int | None = None
    push_bytes_per_worker: int | None = None


class MeasuredTraffic(Open):
    """Bytes per timed step the hosts' interfaces sent (/proc/net/dev), all hosts together."""
    bytes_per_step: float | None = None
    hosts: int | None = None
    steps: int | None = None
    sent_by_interface: dict[str, int] = {}
    comparable: bool = Field(True, description="false where NCCL's paths bypass the interfaces (a GPU run)")
    not_comparable: str | None = None


class Traffic(Open):
    computed: ComputedTraffic
    measured: MeasuredTraffic | None = Field(description="null where the counters could not be read")
    definition: str | None = None

INDEX_BYTES = {"torch": 8, "tensorflow": 4}
FLOAT_BYTES = 4
NET_DEV = Path("/proc/net/dev")


def tx_bytes(path: Path = NET_DEV) -> dict[str, int] | None:
    """Bytes each network interface has transmitted since boot; None where the counters cannot be read."""
    try:
        lines = path.read_text().splitlines()[2:]
    except OSError:
        return None
    counters = {}
    for line in lines:
        name, _, fields = line.partition(":")
        values = fields.split()
        if len(values) >= 9:
            counters[name.strip()] = int(values[8])  # receive: 8 fields, then transmit bytes
    return counters


def sent_between(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, int] | None:
    """Bytes each interface sent between two readings (interfaces in both)."""
    if before is None or after is None:
        return None
    return {name: after[name] - before[name] for name in before if name in after}


def computed(cfg) -> ComputedTraffic:
    """The bytes one step of ``cfg`` (resolved) moves, by path, from the model's shapes (see the module doc)."""
    spec = model(cfg.model)
    v = variant(mode_label(cfg.mode, cfg.strategy))
    n = cfg.np
    sparse = cfg.sparse_embeddings and not cfg.sparse_as_dense
    params = spec.parameters(cfg.num_classes, untied=cfg.sparse_embeddings)
    embedding = spec.per_class * cfg.num_classes if cfg.sparse_embeddings else 0
    dense_params = params - embedding if sparse else params
    element = 2 if cfg.fp16_allreduce else FLOAT_BYTES
    dense = dense_params * element
    rows = 2 * cfg.batch_size * cfg.seq_len if cfg.sparse_embeddings else 0
    sparse_rank = rows * (FLOAT_BYTES * spec.per_class + INDEX_BYTES[v.mode.framework]) if sparse else 0
    common = {"exchange": v.exchange, "ranks": n, "dense_bytes": dense, "rows_per_rank": rows}
    if v.exchange == "collective":
        allreduce, allgather = 2 * (n - 1) * dense, n * (n - 1) * sparse_rank
        return ComputedTraffic(**common, sparse_bytes_per_rank=sparse_rank, allreduce_bytes=allreduce,
                               allgather_bytes=allgather, bytes_per_step=allreduce + allgather)
    if v.exchange == "hybrid":
        # Sharded table: no row is reduced; each all-to-all carries a rank's r ids, rows or row gradients.
        per_rank = rows * (INDEX_BYTES[v.mode.framework] + 2 * FLOAT_BYTES * spec.per_class)
        alltoall, allreduce = (n - 1) * per_rank, 2 * (n - 1) * dense
        return ComputedTraffic(**common, sparse_bytes_per_rank=0, alltoall_bytes_per_rank=per_rank,
                               alltoall_bytes=alltoall, allreduce_bytes=allreduce, bytes_per_step=alltoall + allreduce)
    if v.exchange == "ps":
        # Untied, the forward pass gathers its rows on the server (sparse or not); the push is the gradient.
        looked_up = rows * spec.per_class if cfg.sparse_embeddings else 0
        pull = (params - embedding + looked_up) * FLOAT_BYTES
        push = dense + sparse_rank
        return ComputedTraffic(**common, sparse_bytes_per_rank=sparse_rank, pull_bytes_per_worker=pull,
                               push_bytes_per_worker=push, bytes_per_step=n * (pull + push))
    # one process (single-device modes, mirrored): nothing crosses a process boundary
    return ComputedTraffic(**common, sparse_bytes_per_rank=sparse_rank, bytes_per_step=0)


# NCCL's settings under which it sends everything through sockets, which the interface counters see.
NCCL_ALL_SOCKETS = {"NCCL_NET": "Socket", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}


def not_comparable(device: str, env: dict[str, str]) -> str | None:
    """Why the interface counters cannot check a run's exchange (None where they can: module docstring)."""
    if device != "cuda" or all(env.get(k) == v for k, v in NCCL_ALL_SOCKETS.items()):
        return None
    return ("NCCL carries a GPU run's exchange over NVLink, PCIe peer-to-peer, shared memory or RDMA, which the "
            "interface counters (/proc/net/dev) do not count")


def measured(ranks: list[RankRecord], steps: int, device: str = "cpu",
             env: dict[str, str] | None = None) -> MeasuredTraffic | None:
    """Bytes per timed step, from each host's reading (its local rank 0's part); None without one.
    ``comparable`` says whether the figure can check the computed one (:func:`not_comparable`)."""
    readings = [sent for r in ranks if (sent := r.parts.get(TrafficTracker.name)) is not None]
    if not readings or steps < 1:
        return None
    by_interface: dict[str, int] = {}
    for reading in readings:
        for name, sent in reading.items():
            by_interface[name] = by_interface.get(name, 0) + sent
    why = not_comparable(device, os.environ if env is None else env)
    return MeasuredTraffic(bytes_per_step=sum(by_interface.values()) / steps, hosts=len(readings), steps=steps,
                           sent_by_interface=by_interface, comparable=why is None, not_comparable=why)


@register
class TrafficTracker(Tracker):
    """The bytes each interface of the host sent over the timed windows, read by the host's local rank 0."""
    name = field = "traffic"
    model = Traffic

    @classmethod
    def wanted(cls, ctx) -> bool:
        return ctx.launch.local_rank == 0  # one reading per host

    def before_windows(self) -> None:
        self.before = tx_bytes()

    def after_windows(self) -> None:
        self.sent = sent_between(self.before, tx_bytes())

    def part(self) -> dict[str, int] | None:
        return self.sent

    @classmethod
    def section(cls, job: Ranks) -> Traffic:
        return Traffic(
            computed=computed(job.cfg),
            measured=measured(job.ranks, job.timed_steps, job.cfg.device.value),
            definition="bytes one step moves between processes, all of them together: computed from the shapes, "
                       "and measured by the hosts' interface counters over the timed windows (bench.measure.traffic)",
        )
