"""torch-hybrid (Parallax's hybrid on TorchRec): the table sharded row-wise, the rest under DDP. Its bytes per step
(computed and measured), bench allreduce --op alltoall, bench predict's all-to-all term, and what it refuses.
bench verify's PASS and the skipped exchange's FAIL are in tests/multiproc/test_sparse.py, beside the other modes'."""

import dataclasses

import pytest

from bench.config import RunConfig
from bench.errors import BenchError


def _resolved(np=2, vocab=1000, batch=8, seq=32):
    return RunConfig(mode="torch-hybrid", model="transformer-small", num_classes=vocab, batch_size=batch,
                     seq_len=seq, sparse_embeddings=True).resolve("cpu", np)


@pytest.mark.parametrize("np_", [2, 4])
def test_computed_bytes_follow_the_formula(np_):
    """(n-1) r (i + 8d) through the all-to-alls (ids out, rows back, row gradients out), and the dense part's
    ring allreduce 2 (n-1) D, which leaves the table out but keeps the untied output projection."""
    from bench.measure import traffic
    from bench.models import MODELS

    record = traffic.computed(_resolved(np_))
    spec = MODELS["transformer-small"]
    rows, d = 2 * 8 * 32, 64
    dense = 4 * (spec.parameters(1000, untied=True) - 1000 * d)
    assert record.exchange == "hybrid" and record.dense_bytes == dense
    assert record.alltoall_bytes_per_rank == rows * (8 + 8 * d) and record.sparse_bytes_per_rank == 0
    assert record.alltoall_bytes == (np_ - 1) * rows * (8 + 8 * d)
    assert record.bytes_per_step == record.alltoall_bytes + 2 * (np_ - 1) * dense


def test_predict_prices_the_all_to_all():
    from bench.commands.predict import Inputs, comm_time

    dense = Inputs(step_time_s=0.1, batch_size=8, gradient_bytes=10**9, busbw_GBps=1.0, latency_s=1e-3,
                   fusion_bytes=0)
    hybrid = dataclasses.replace(dense, alltoall_bytes=3 * 10**8, alltoall_busbw_GBps=0.5, alltoall_latency_s=2e-3)
    for n in (2, 4):  # three all-to-alls a step: 3 (n - 1) a" + (n - 1) / n R / B"
        assert comm_time(hybrid, n) - comm_time(dense, n) == pytest.approx(3 * (n - 1) * 2e-3 + (n - 1) / n * 0.6)
    assert comm_time(hybrid, 1) == 0


def test_the_alltoall_collective():
    import numpy as np

    from bench.commands.allreduce import AllreduceConfig
    from bench.commands.allreduce.collectives import ALLTOALL

    assert ALLTOALL.bus_factor(4) == pytest.approx(0.75)
    assert ALLTOALL.bandwidths(10**6, 0.01, 4) == pytest.approx((0.1, 0.075))
    assert ALLTOALL.elements(1001, 2) == 1000  # whole blocks
    good = np.repeat(np.arange(1, 4, dtype=np.float32), 4)  # block j from rank j: j + 1
    assert ALLTOALL.correct(good, 3, 12)
    assert not ALLTOALL.correct(np.full(12, 2.0, np.float32), 3, 12)  # every block the same: nothing moved
    assert not ALLTOALL.correct(good[::-1].copy(), 3, 12)
    with pytest.raises(BenchError, match="--backend tf has no alltoall"):
        AllreduceConfig(backend="tf", op="alltoall")
