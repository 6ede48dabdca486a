"""bench predict: the formula on hand-computed inputs, inputs from bench's own results, published figures."""

import json

from tests import samples
from tests.conftest import bench


def test_cli_prints_a_table_and_rejects_bad_input(tmp_path):
    r = bench("predict", "--model", "vgg16", "--images-per-sec", "154", "--busbw", "2.8", "--gpus", "1,128")
    assert r.returncode == 0, r.stderr
    assert "128" in r.stdout and "100.0%" in r.stdout
    for args, message in [(["--busbw", "1"], "--step-time or --images-per-sec"),
                          (["--step-time", "1"], "--busbw"),
                          (["--step-time", "1", "--busbw", "1", "--gpus", "0"], "--gpus"),
                          (["--step-time", "1", "--busbw", "1", "--overlap", "2"], "--overlap"),
                          (["--sweep", str(tmp_path)], "--allreduce")]:
        r = bench("predict", *args)
        assert r.returncode == 1 and r.stderr.strip().count("\n") == 0 and message in r.stderr, (args, r.stderr)
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"kind": "other"}))
    r = bench("predict", "--step-time", "1", "--allreduce", str(bad))
    assert r.returncode == 1 and "is not a record of hvdbench" in r.stderr


def test_cli_sweep_check_on_the_fixture(tmp_path):
    ar = samples.allreduce([(4096, 1e-3, 0.004), (553430176, 0.5, 1.1)], backend="torch")
    path = tmp_path / "ar.json"
    path.write_text(ar.model_dump_json())
    from pathlib import Path

    r = bench("predict", "--sweep", str(Path(__file__).parents[1] / "fixtures" / "sweep-a"), "--allreduce", str(path),
              COLUMNS="200")
    assert r.returncode == 0, r.stderr
    assert "measured" in r.stdout and "error" in r.stdout
