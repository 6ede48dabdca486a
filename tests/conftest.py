import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Small, fast, still real: ResNet-50 (25.6 M parameters, 100 MB of gradients per allreduce) at 32x32.
SMALL = ["--model", "resnet50", "--image-size", "32", "--batch-size", "2", "--num-classes", "10",
         "--warmup-steps", "1", "--steps-per-window", "2", "--windows", "2"]

BIN = Path(sys.executable).parent
# benchmarks/endings.py finds a job's processes; the ending tests share it with the benchmark.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def bench_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "OMPI_", "PMI_", "SLURM_", "TORCHELASTIC_", "HVDBENCH_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    # Open MPI refuses root without these; CI runs as root.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def run(cmd: list[str], timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=bench_env(**env))


def bench(*args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "bench", *args], timeout=timeout, **env)


def only_result(out_dir: Path) -> dict:
    files = sorted(out_dir.glob("*.json"))
    assert len(files) == 1, f"expected one result in {out_dir}, found {[f.name for f in files]}"
    from bench.results import load_result

    return load_result(files[0])


def assert_valid_run(result: dict, mode: str, world: int, launcher: str) -> None:
    assert result["status"] == "ok"
    assert result["mode"] == mode
    assert result["world_size"] == world
    assert result["launcher"] == launcher
    assert result["sync"]["ranks_in_sync"], result["sync"]
    assert result["sync"]["params_changed"], result["sync"]
    assert len(result["sync"]["param_checksums"]) == world
    assert len(result["samples"]["window_s"]) == world
    assert all(len(w) == result["config"]["windows"] for w in result["samples"]["window_s"])
    assert result["summary"]["samples_per_sec_total"] > 0
    assert result["timing"]["init_s"] > result["timing"]["first_step_s"] > 0


def built_image(image: str, make_target: str):
    """The Docker SDK client, once ``image`` is there (the image tests' module fixture)."""
    import docker

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docker"))
    import images

    client = images.client()
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{image} is not built: run 'make {make_target}'")
    return client


def run_container(dk, image: str, args: list[str], results: Path | None = None, timeout: int = 600,
                  **options) -> tuple[int, str]:
    """(exit code, logs) of ``docker run IMAGE ARGS``; ``results`` is mounted at /work/results."""
    volumes = {str(results): {"bind": "/work/results", "mode": "rw"}} if results else {}
    container = dk.containers.run(image, args, volumes=volumes, detach=True, shm_size="1g", **options)
    try:
        code = container.wait(timeout=timeout)["StatusCode"]
        return code, container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)


def has_cuda() -> bool:
    """An NVIDIA GPU is visible (nvidia-smi lists one); no framework is imported to find out."""
    import shutil

    if shutil.which("nvidia-smi") is None:
        return False
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return out.returncode == 0 and "GPU" in out.stdout


def pytest_collection_modifyitems(config, items):
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "results"


def dump(obj) -> str:
    return json.dumps(obj)


@pytest.fixture(autouse=True)
def results_match_the_published_schema(tmp_path):
    """Every result file a test writes (under its tmp_path) validates against `bench schema`'s JSON Schema."""
    yield
    written = [p for p in tmp_path.rglob("*.json") if _is_result(p)]
    if not written:
        return
    import jsonschema

    from bench.schema import json_schema

    validator = jsonschema.Draft202012Validator(json_schema())
    for path in written:
        errors = sorted(validator.iter_errors(json.loads(path.read_text())), key=lambda e: list(e.path))
        assert not errors, f"{path} does not match the result schema: {errors[0].message} at {list(errors[0].path)}"


def _is_result(path: Path) -> bool:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "run_id" in data and data.get("schema_version") == 2 and "kind" not in data
