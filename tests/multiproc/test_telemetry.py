
from tests.conftest import bench, only_result


def test_cpu_run_says_telemetry_unavailable(out):
    r = bench("torch-ddp", "--model", "resnet50", "--image-size", "32", "--batch-size", "2", "--warmup-steps", "0",
              "--steps-per-window", "1", "--windows", "2", "--np", "1", "--output", str(out))
    assert r.returncode == 0, r.stderr
    result = only_result(out)
    assert result["telemetry"] == {"available": False, "reason": "no GPU in use (device cpu)"}
    assert "unavailable" in r.stdout
    assert not list(out.glob("*-telemetry.csv"))
