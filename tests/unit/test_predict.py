"""bench predict: the formula on hand-computed inputs, inputs from bench's own results, published figures."""


import pytest

from bench.commands.predict import (
    Inputs,
    check_published,
    comm_time,
    fit_overlap,
    from_allreduce,
    from_result,
    gradient_bytes,
    predict,
)
from bench.errors import BenchError
from tests import samples


def test_formula_on_known_inputs():
    # G = 1e9 bytes in one message, B = 10 GB/s, a = 1 ms, t1 = 1 s, b = 32, no overlap.
    inp = Inputs(step_time_s=1.0, batch_size=32, gradient_bytes=10**9, busbw_GBps=10.0, latency_s=1e-3,
                 fusion_bytes=0)
    assert comm_time(inp, 1) == 0.0
    # N = 4: 2*3*1 ms + 2*3/4 * 1e9 / 1e10 = 0.006 + 0.15
    assert comm_time(inp, 4) == pytest.approx(0.156)
    p = predict(inp, 4)
    assert p.step_s == pytest.approx(1.156)
    assert p.efficiency == pytest.approx(1 / 1.156)
    assert p.samples_per_sec_total == pytest.approx(4 * 32 / 1.156)
    half = predict(Inputs(**{**inp.__dict__, "overlap": 0.5}), 4)
    assert half.step_s == pytest.approx(1.078)
    hidden = predict(Inputs(**{**inp.__dict__, "overlap": 1.0}), 4)
    assert hidden.efficiency == pytest.approx(1.0)


def test_fusion_buffers_multiply_the_latency():
    inp = Inputs(step_time_s=1.0, batch_size=1, gradient_bytes=100 * 2**20, busbw_GBps=1e9, latency_s=1e-3,
                 fusion_bytes=64 * 2**20)
    assert inp.messages == 2
    assert comm_time(inp, 3) == pytest.approx(2 * 2 * 2 * 1e-3, rel=1e-6)


def test_intra_node_bandwidth_applies_within_a_node():
    inp = Inputs(step_time_s=1.0, batch_size=1, gradient_bytes=10**9, busbw_GBps=1.0, fusion_bytes=0,
                 gpus_per_node=8, intra_busbw_GBps=100.0)
    assert comm_time(inp, 8) == pytest.approx(2 * 7 / 8 * 10**9 / 100e9)
    assert comm_time(inp, 16) == pytest.approx(2 * 15 / 16 * 10**9 / 1e9)


def test_fit_overlap_inverts_predict():
    inp = Inputs(step_time_s=0.4, batch_size=64, gradient_bytes=5 * 10**8, busbw_GBps=3.0, latency_s=1e-5,
                 overlap=0.3)
    e = predict(inp, 64).efficiency
    assert fit_overlap(inp, 64, e) == pytest.approx(0.3)


def test_a_measured_overlap_is_carried_as_a_share_and_bounded_by_the_backward_pass():
    from bench.commands.predict import overlap_from_attribution

    def rank(r, compute):
        return {"rank": r, "host": "h", "device": "cpu", "compute_s": compute, "exchange_s": 0.1, "step_s": 1.0,
                "exposed_s": 0.0, "hidden_share": 0.4, "compute_step_s": [compute], "exchange_step_s": [0.1]}

    section = {"measured": True, "hidden_share_median": 0.4, "reason": None, "definitions": {},
               "per_rank": [rank(0, 0.3), rank(1, 0.9), rank(2, 0.6)]}
    hiding = overlap_from_attribution(samples.result(run_id="r", world_size=3, attribution=section))
    assert hiding == {"overlap": 0.4, "hidden_cap_s": pytest.approx(2 / 3 * 0.6)}  # the median rank's backward
    inp = Inputs(step_time_s=1.0, batch_size=32, gradient_bytes=10**9, busbw_GBps=10.0, fusion_bytes=0, **hiding)
    # N = 4: t_comm 0.15 s, 40% hidden (0.06 s) is under the bound
    assert predict(inp, 4).step_s == pytest.approx(1.0 + 0.15 - 0.06)
    slow = Inputs(**{**inp.__dict__, "busbw_GBps": 0.1})  # t_comm 15 s: 40% would be 6 s, the bound holds it
    assert predict(slow, 4).step_s == pytest.approx(1.0 + 15 - 0.4)
    for parts, message in [({"world_size": 1}, "no per-rank attribution"),
                           ({"world_size": 2, "attribution": {"measured": False, "reason": "ps", "definitions": {}}},
                            "was not measured: ps")]:
        with pytest.raises(BenchError, match=message):
            overlap_from_attribution(samples.result(run_id="r", **parts))


def test_gradient_bytes_follow_classes_and_fp16():
    assert gradient_bytes("vgg16") == 138_357_544 * 4
    assert gradient_bytes("vgg16", 10) == (138_357_544 - 4097 * 990) * 4
    assert gradient_bytes("inception3", 1000, fp16_allreduce=True) == 27_161_264 * 2


@pytest.mark.parametrize("kwargs,message", [
    ({"step_time_s": 0}, "step time"),
    ({"busbw_GBps": -1}, "--busbw"),
    ({"overlap": 1.5}, "--overlap"),
])
def test_inputs_reject_bad_values(kwargs, message):
    base = {"step_time_s": 1.0, "batch_size": 1, "gradient_bytes": 1, "busbw_GBps": 1.0}
    with pytest.raises(BenchError, match=message):
        Inputs(**{**base, **kwargs})


def test_inputs_from_bench_results():
    result = samples.result(world_size=1, config={"batch_size": 8, "model": "resnet50", "num_classes": 1000},
                            summary={"samples_per_sec_per_gpu": 16.0})
    assert result.traffic is None  # a record from before bench.measure.traffic: every gradient dense
    assert from_result(result) == {"step_time_s": 0.5, "batch_size": 8, "gradient_bytes": 25_557_032 * 4}
    with pytest.raises(BenchError, match="world size 1"):
        from_result(result.model_copy(update={"world_size": 2}))
    ar = samples.allreduce([(4096, 2e-4, 0.02), (10**8, 0.1, 1.0), (10**9, 0.8, 1.25)])
    net = from_allreduce(ar, 4 * 10**8)
    assert net.busbw_GBps == 1.25 and net.busbw_at_bytes == 10**9  # nearest on a log scale
    assert net.latency_s == pytest.approx(1e-4)  # 2e-4 / (2 (2 - 1))


def test_each_mode_takes_its_own_backends_measurement():
    from bench.commands.predict import pick_allreduce

    def ar(backend):
        return samples.allreduce([(4096, 1e-4, 0.1)], backend=backend)

    torch_ar, hvd_ar = ar("torch"), ar("horovod-torch")
    assert pick_allreduce("torch-ddp", [hvd_ar, torch_ar]) is torch_ar
    assert pick_allreduce("torch-horovod", [hvd_ar, torch_ar]) is hvd_ar
    assert pick_allreduce("tf-horovod", [hvd_ar, torch_ar]) is None
    tf_ar = ar("tf")
    assert pick_allreduce("tf-native:multiworker", [hvd_ar, tf_ar]) is tf_ar
    assert pick_allreduce("tf-horovod", [torch_ar]) is torch_ar  # one measurement serves every mode


def test_published_check_covers_every_figure():
    rows = check_published()
    assert {(r.model, r.gpus) for r in rows} >= {("vgg16", 128), ("vgg16", 512), ("inception3", 512),
                                                      ("resnet101", 512), ("resnet101", 16)}
    for r in rows:
        assert 0 < r.predicted_efficiency <= 1
        assert r.error_points == pytest.approx(100 * (r.predicted_efficiency - r.efficiency))
    # more communication per compute, lower efficiency: VGG-16 below ResNet-101 below Inception V3 at 512
    e = {r.model: r.predicted_efficiency for r in rows if r.gpus == 512}
    assert e["vgg16"] < e["resnet101"] < e["inception3"]


def test_the_sweep_check_prices_each_mode_with_the_measured_allreduce():
    """bench predict --sweep on real CPU runs and an allreduce record read as its model: a row per mode at n = 2,
    the one measurement serving both modes, and the measured efficiency T_2 / (2 T_1) from the results."""
    from bench.commands.predict import HOROVOD_FUSION_BYTES, check_sweep
    from bench.records.collect import load_results
    from tests.conftest import FIXTURES

    measured = samples.allreduce([(4096, 1e-3, 0.004), (553430176, 0.5, 1.1)], backend="torch")
    results = load_results([FIXTURES / "sweep-a"])
    rows = check_sweep(results, [measured], None, HOROVOD_FUSION_BYTES)
    assert sorted((r.mode, r.gpus, r.backend) for r in rows) == [("torch-ddp", 2, "torch"),
                                                                          ("torch-horovod", 2, "torch")]
    per_gpu = {(r.mode, r.world_size): r.summary.samples_per_sec_per_gpu for r in results}
    for r in rows:
        assert r.measured_efficiency == pytest.approx(per_gpu[(r.mode, 2)] / per_gpu[(r.mode, 1)])
        assert 0 < r.predicted_efficiency <= 1 and r.busbw_GBps == 1.1


def test_predict_models_the_fusion_buffer_the_runs_use():
    """bench predict's default buffer is the one a Horovod run gets when --fusion-threshold is left unset."""
    from bench.commands.predict import PredictConfig
    from bench.vocabulary import HOROVOD_KNOBS

    assert PredictConfig().fusion_mib * 1024**2 == HOROVOD_KNOBS["fusion_threshold"][1] == 128 * 1024**2
