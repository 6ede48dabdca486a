
import pytest

from bench.config import RunConfig
from bench.launching.detect import LaunchInfo
from bench.measure import telemetry
from bench.measure.raw import Gathered
from bench.records.results import build_result
from tests import samples
from tests.fake_nvml import FakeGPU, FakeNVML
from tests.unit.test_telemetry import run_sampler


def test_result_carries_telemetry_or_its_absence():
    cfg = RunConfig(mode="torch-ddp", batch_size=4, steps_per_window=5, windows=2).resolve("cuda", 1)
    nvml = FakeNVML([FakeGPU(power_w=250.0)])
    s = run_sampler(nvml, [0], seconds=0.3)
    rank = samples.rank(0, device="cuda:0", setup_s=1.0, first_step_s=0.5, init_s=2.0, warmup_step_s=[0.2],
                        telemetry=telemetry.Sampled(summary=s.summary(), samples=s.samples))
    r = build_result(cfg, LaunchInfo("self"), Gathered(ranks=[rank], environment={}, t_start=0.0), "run1")
    assert r.telemetry.available and r.telemetry.energy_per_sample_j == pytest.approx(r.telemetry.energy_j / 40)
    rank.parts["telemetry"] = "why"  # no sampler ran: the rank's word on why
    r = build_result(cfg, LaunchInfo("self"), Gathered(ranks=[rank], environment={}, t_start=0.0), "run2")
    assert r.telemetry.model_dump(exclude_unset=True) == {"available": False, "reason": "why"}


def test_the_time_series_beside_the_result_holds_every_sample_in_its_columns(tmp_path):
    import csv

    from bench.records.results import check_output_dir, write_result

    cfg = RunConfig(mode="torch-ddp", batch_size=4, steps_per_window=5, windows=2).resolve("cuda", 1)
    s = run_sampler(FakeNVML([FakeGPU(power_w=250.0, energy=False)]), [0], seconds=0.2)
    rank = samples.rank(0, device="cuda:0", setup_s=1.0, first_step_s=0.5, init_s=2.0, warmup_step_s=[0.2],
                        telemetry=telemetry.Sampled(summary=s.summary(), samples=s.samples))
    gathered = Gathered(ranks=[rank], environment={}, t_start=0.0)
    r = build_result(cfg, LaunchInfo("self"), gathered, "run3")
    out = check_output_dir(tmp_path / "out")
    write_result(out, r, s.samples)
    with open(out / r.telemetry.samples_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == telemetry.COLUMNS and len(rows) == len(s.samples) > 3
    assert {row["power_w"] for row in rows} == {"250.0"} and {row["energy_mj"] for row in rows} == {""}
