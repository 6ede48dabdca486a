"""bench tune's knee: the smallest batch whose doubling no longer pays, or the largest that fits."""

import pytest

from bench.commands.tune import TuneConfig, flags, knee, ran_out_of_memory
from bench.errors import BenchError
from bench.records.kinds import TunePoint


def point(batch, rate, gain=None, status="ok", error=None):
    return TunePoint(batch=batch, rate=rate, gain=gain, status=status, error=error, result=None)


def test_the_knee_is_the_batch_before_the_doubling_that_did_not_pay():
    points = [point(64, 1000.0), point(128, 1500.0, 0.5), point(256, 1650.0, 0.1), point(512, 1670.0, 0.012)]
    assert knee(points, 0.02) == (256, "doubling to 512 gained +1.2% (< 2%)")
    assert knee(points[:3], 0.02) == (256, "reached --max-batch")
    oom = [*points[:3], point(512, None, status="out of memory")]
    assert knee(oom, 0.02) == (256, "batch 512 ran out of memory")
    failed = [*points[:2], point(256, None, status="failed", error="error: rank 1 exited")]
    assert knee(failed, 0.02) == (128, "batch 256 failed: error: rank 1 exited")
    assert knee([point(64, None, status="out of memory")], 0.02) == (None, "batch 64: out of memory")
    assert knee([], 0.02) == (None, "no batch ran")


def test_an_out_of_memory_run_is_told_from_another_failure_by_its_line(tmp_path):
    log = tmp_path / "cell.log"
    log.write_text("torch-single: rank 0: error: out of GPU memory (CUDA out of memory. Tried to allocate 2.00 GiB):"
                   " try a smaller --batch-size, or --precision amp-bf16\n")
    assert ran_out_of_memory(log)
    log.write_text("error: rank 0 exited with code 1, first of the ranks\n")
    assert not ran_out_of_memory(log) and not ran_out_of_memory(tmp_path / "missing.log")


def test_options_are_checked_and_written_as_the_command_line_writes_them():
    assert flags({"tuned": True, "image_size": 224, "channels_last": False}) == [
        "--nchw", "--image-size", "224", "--tuned"]
    with pytest.raises(BenchError, match="torch-single runs on one device: drop --np"):
        TuneConfig(mode="torch-single", np=2)
    with pytest.raises(BenchError, match="--start 512 is above --max-batch 256"):
        TuneConfig(mode="torch-ddp", start=512, max_batch=256)
    with pytest.raises(BenchError, match="unknown mode"):
        TuneConfig(mode="nope")
    assert TuneConfig(mode="torch-ddp", start=16).first_batch() == 16
    assert TuneConfig(mode="torch-ddp", common={"device": "cpu"}).first_batch() == 8
