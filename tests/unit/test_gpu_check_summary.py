"""The GPU check's summary holds every ResNet-50 GPU run against the published figure of its GPU and precision."""

from bench.records.schema import Result
from tests import samples
from tools.gpu_check_summary import anchors_section, soak_section


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


def test_a_check_that_stopped_before_any_run_still_gets_its_summary(tmp_path, monkeypatch, capsys):
    """A call that stopped (its time budget) after bench peak and bench data bench, before any training run,
    still writes the summary: the steps, the peak and each loader alone (it failed on "no training results");
    and a data bench that decoded with DALI on the GPU is not called unmeasured."""
    import sys

    from bench.records import store
    from bench.records.kinds import DataBench
    from bench.records.store import Kind
    from tools import gpu_check_summary

    store.write(tmp_path / "peak.json", samples.record(Kind.PEAK))
    rows = [{"loader": "torch", "workers": 1, "device": "cpu", "images_per_sec": 137.0, "raw": [130.0, 144.0],
             "tokens_per_sec": None},
            {"loader": "dali", "workers": 1, "device": "cuda", "images_per_sec": 2500.0, "raw": [2500.0],
             "tokens_per_sec": None}]
    store.write(tmp_path / "data-bench.json", DataBench(**{**samples.record(Kind.DATA_BENCH), "rows": rows[:1],
                                                           "decode_rate_per_core": {"torch": 137.0}}))
    (tmp_path / "status.tsv").write_text("install\t0\t1\t\npeak-fp32\t0\t30\t\ndata-bench\t0\t20\t\n")
    monkeypatch.setattr(sys, "argv", ["gpu_check_summary", str(tmp_path), str(tmp_path / "status.tsv")])
    gpu_check_summary.main()
    summary = capsys.readouterr().out
    assert "| data-bench | ok | 20 |  |" in summary and "## Runs" not in summary
    assert "| cpu (2 threads) | fp32 |" in summary
    assert "| torch | cpu | 1 | 137.0 | 130 144 | 137.0 |" in summary
    assert "DALI decoding on the GPU: not measured" in summary
    section = gpu_check_summary.data_bench_section([DataBench(**{**samples.record(Kind.DATA_BENCH), "rows": rows})])
    assert "| dali | cuda | 1 | 2500.0 | 2500 | - |" in section and not any("not measured" in x for x in section)


def trained(loader: str, train_loss: float, created: str) -> Result:
    point = {"epoch": 2, "samples": 8192, "wall_s": 30.0, "eval_s": 1.0, "top1": 0.01, "top5": 0.05,
             "eval_loss": 6.9, "train_loss": train_loss}
    return run("cuda:0 NVIDIA H200", "amp-bf16", 1500.0, mode="torch-ddp", data="/jpegs", channels_last=True,
               parts={"created_utc": created, "input": {"source": "dataset", "loader": loader, "definition": "-"},
                      "training": {"target_accuracy": None, "reached": None, "time_to_target_s": None,
                                   "epochs_to_target": None, "curve": [point], "definition": "-"}})


def test_dalis_losses_with_channels_last_are_held_beside_the_torch_loaders():
    """The loss steps (DALI's batch converted on the copy stream, against the torch loader on the same files): a
    row per loader, its newest run, and the ratio of their training losses; without DALI, said unmeasured."""
    from tools.gpu_check_summary import loaders_section

    rows = loaders_section([trained("torch", 6.0, "1"), trained("dali", 9.9, "1"), trained("dali", 6.3, "2"),
                            run("cuda:0 NVIDIA H200", "amp-bf16", 1.0)])
    assert [r.split(" | ")[0] for r in rows if r.startswith("| ") and "---" not in r][1:] == ["| torch", "| dali"]
    assert any(r.startswith("| dali | torch-ddp | resnet50 | amp-bf16 | 1 | 2 | 6.3000 | 6.9000 | 0.0100 | ")
               for r in rows), rows
    assert rows[-1] == "Training loss, DALI / torch loader: 1.050."
    alone = loaders_section([trained("torch", 6.0, "1")])
    assert alone[-1] == "DALI with channels-last: not measured (no DALI on this machine)."
    assert loaders_section([run("cuda:0 NVIDIA H200", "amp-bf16", 1.0)]) == []


def test_a_soak_shows_each_gpus_rate_throttling_heat_and_power_and_what_was_not_ok():
    from tests.fake_nvml import FakeGPU
    from tests.unit.test_soak import FakeLoad, soak_of

    record = soak_of([FakeGPU(), FakeGPU(temperature=[60, 70], throttle=[0, 0x4])], [FakeLoad(0), FakeLoad(1)])
    section = soak_section([record])
    rows = [line for line in section if line.startswith("| cuda:")]
    assert rows[0].startswith("| cuda:0 NVIDIA H100 80GB HBM3 | 1 | 100 | 100 | 0 of ") and rows[0].endswith(
        "| 61 | 300 / 700 | True |")
    assert "| 70 |" in rows[1] and " of " in rows[1] and not rows[1].split("|")[5].strip().startswith("0 of")
    assert any(line.startswith("- error: throttle cuda:1") for line in section)
    assert any(line.startswith("- warning: temperature node") for line in section)
    assert soak_section([]) == []
