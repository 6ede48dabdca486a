"""The GPU check's summary holds every ResNet-50 GPU run against the published figure of its GPU and precision."""

from bench.records.schema import Result
from tests import samples
from tools.gpu_check_summary import anchors_section


def run(device: str, precision: str, rate: float, mode: str = "torch-single", parts: dict | None = None,
        **config) -> Result:
    return samples.result(mode=mode, config={"model": "resnet50", "device": "cuda", "precision": precision,
                                             "batch_size": 64, "profile": "gpu-paper", **config},
                          environment={"ranks": [{"rank": 0, "local_rank": 0, "host": "h", "device": device}]},
                          summary={"samples_per_sec_per_gpu": rate}, **(parts or {}))


def test_resnet50_runs_are_held_against_lambdas_and_mlperfs_figures():
    rows = anchors_section([
        run("cuda:0 NVIDIA H100 80GB HBM3", "amp-fp16", 2791 / 2),
        run("cuda:0 NVIDIA H200", "fp32", 2270.0, batch_size=640),
        run("cuda:0 NVIDIA H200", "amp-bf16", 3090.0, profile="gpu-tuned", batch_size=256, channels_last=True,
            compile="default", fused_optimizer=True),
        run("cuda:0 NVIDIA A100-SXM4-80GB", "amp-fp16", 2000.0),  # no anchor for this GPU: no row
        run("cuda:0 NVIDIA H100 80GB HBM3", "fp32", 1000.0, data="/data"),  # from files: not the synthetic figure
    ])
    body = rows[5:]
    assert len(body) == 3
    assert body[0].startswith("| torch-single | amp-fp16 | batch 64, gpu-paper | 1395.5 | Lambda, PyTorch AMP 2791 at "
                              "batch 1280 | 0.500 | 0.195 |")
    assert "| Lambda, PyTorch TF32 2270 at batch 640 | 1.000 | 0.286 |" in body[1]
    assert body[2].startswith("| torch-single | amp-bf16 | batch 256, gpu-tuned, channels-last, compiled (default), "
                              "fused optimizer | 3090.0 | Lambda, PyTorch AMP 3090 at batch 2560 | 1.000 |")
    assert anchors_section([run("cuda:0 NVIDIA A100", "fp32", 1.0)]) == []


def test_each_run_is_held_against_the_reference_that_matches_it():
    from tools.gpu_check_summary import _against

    ddp = run("cuda:0 NVIDIA H200", "amp-bf16", 1058.0, mode="torch-ddp", image_size=224)
    assert _against(ddp) == "50% of 2116 (hvdbench GPU check)"
    assert _against(run("cuda:0 NVIDIA H200", "amp-bf16", 1058.0, image_size=224, batch_size=32)) == "-"


def test_traced_runs_get_their_files_and_cost():
    from tools.gpu_check_summary import trace_section

    traced = run("cuda:0 NVIDIA H200", "fp32", 1000.0, mode="torch-ddp", data="/data", parts={
        "world_size": 1, "trace": {"steps": 5, "traced_step_s": 0.0121, "untraced_step_s": 0.011, "cost": 0.1,
                                   "folder": "20261128T000000Z-torch-ddp-0.trace", "horovod_timeline": None,
                                   "per_rank": [], "definitions": {}}})
    rows = trace_section([traced, run("cuda:0 NVIDIA H200", "fp32", 1000.0)])
    assert rows[-1] == "| torch-ddp | resnet50 | 1 | 5 | 12.10 | 11.00 | +10.0% | 20261128T000000Z-torch-ddp-0.trace/ |"
    assert len(rows) == 6  # one row: the untraced run has none
    assert trace_section([run("cuda:0 NVIDIA H200", "fp32", 1000.0)]) == []
