import importlib.util
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import SCHEMA_VERSION

# Small, fast, still real: ResNet-50 (25.6 M parameters, 100 MB of gradients per allreduce) at 32x32.
SMALL = ["--model", "resnet50", "--image-size", "32", "--batch-size", "2", "--num-classes", "10",
         "--warmup-steps", "1", "--steps-per-window", "2", "--windows", "2"]

BIN = Path(sys.executable).parent
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent  # the checkout
FIXTURES = TESTS / "fixtures"

@pytest.fixture(scope="session")
def digits(tmp_path_factory):
    """scikit-learn's handwritten digits in the CIFAR-10 format (`bench data make --from digits`), made once per
    session: what the training tests train on."""
    from bench.data.make import MakeConfig, make

    root = tmp_path_factory.mktemp("data") / "digits"
    make(MakeConfig(path=str(root), format="cifar", source="digits"))
    return root


@pytest.fixture(scope="session")
def jpegs(tmp_path_factory):
    """A small ImageNet-layout dataset made once per session: 50 JPEGs of 48x48 in 4 classes (40 to train)."""
    from bench.data.make import MakeConfig, make

    root = tmp_path_factory.mktemp("data") / "jpegs"
    make(MakeConfig(path=str(root), images=50, classes=4, image_size=48))
    return root


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


def tool(name: str) -> list[str]:
    """The command line of tools/NAME.py: a module of the tools package, run with cwd=ROOT."""
    return [sys.executable, "-m", f"tools.{name}"]


def one_line_error(r: subprocess.CompletedProcess, *, code: int | None = None) -> str:
    """The one line a refused command printed (a non-zero exit, or exactly ``code``; no traceback)."""
    assert r.returncode != 0 if code is None else r.returncode == code
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


def only_result(out_dir: Path) -> dict:
    """The folder's one result as its file holds it, after bench has read it back as its model."""
    files = sorted(out_dir.glob("*.json"))
    assert len(files) == 1, f"expected one result in {out_dir}, found {[f.name for f in files]}"
    from bench.records.results import load_result

    load_result(files[0])
    return json.loads(files[0].read_text())


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
    hosts = result["host_load"]["hosts"]  # every rank's own CPU time, on each host with the host's counters
    assert sum(h["ranks"] for h in hosts) == result["processes"] and sum(h["run_cores"] for h in hosts) > 0
    assert_attribution_adds_up(result)


def assert_attribution_adds_up(result: dict) -> None:
    """A distributed run carries its per-rank attribution (bench.measure.attribution), or says why it has none; where
    measured, every rank's parts add up: compute + data wait + exposed = the timed step (exposed 0 where noise made
    compute and the wait the longer), each part was measured, and a rank's data wait is its own raw waits (the input
    section's) in the window the step comes from."""
    section = result.get("attribution")
    if section is None:
        assert result["processes"] < 2 or not result["config"].get("attribution_steps"), "no attribution"
        return
    if not section["measured"]:
        assert section["reason"], section
        return
    assert [p["rank"] for p in section["per_rank"]] == list(range(result["processes"]))
    windows, per_window = result["samples"]["window_s"], result["samples"]["steps_per_window"]
    lengths = [max(times) for times in zip(*windows, strict=True)]
    fastest = lengths.index(min(lengths))
    fed = {q["rank"]: q["wait_step_s"] for q in (result.get("input") or {}).get("per_rank") or []
           if q.get("rank") is not None and "worker" not in q}
    for p in section["per_rank"]:
        assert p["compute_s"] > 0 and p["exchange_s"] > 0, p
        assert p["exposed_s"] >= 0, p  # never negative (numbers issue, finding 12)
        waits = fed.get(p["rank"], [])[fastest * per_window:(fastest + 1) * per_window]
        assert p["data_wait_s"] == pytest.approx(sum(waits) / per_window if waits else 0.0), p
        if p["exposed_clipped"]:  # compute and the wait longer than a whole timed step: noise, exposed 0
            assert p["exposed_s"] == 0 and p["compute_s"] + p["data_wait_s"] > p["step_s"], p
        else:
            assert abs(p["compute_s"] + p["data_wait_s"] + p["exposed_s"] - p["step_s"]) <= 1e-9 * p["step_s"], p
    assert 0 < section["cost_s"]


# sbatch --wait polls the controller after 2, 8 and then every 32 s, so it returns up to half a minute after
# the job ended; this line polls twice a second instead and exits with the job's exit code (128 + the signal
# if one ended it). Used on the host and on the cluster's controller alike.
SBATCH_WAIT = (
    'id=$(sbatch --parsable "$@") || exit $?; id=${id%%;*}; '
    "while scontrol -o show job $id | grep -Eq 'JobState=(PENDING|CONFIGURING|RUNNING|COMPLETING|SUSPENDED)'; "
    "do sleep 0.5; done; "
    "code=$(scontrol -o show job $id | sed -n 's/.* ExitCode=\\([0-9]*\\):\\([0-9]*\\).*/\\1 \\2/p'); "
    'set -- $code; [ "${2:-0}" != 0 ] && exit $((128 + $2)); exit ${1:-1}')


def sbatch_wait_line(args: str) -> str:
    """A shell line that submits ``sbatch ARGS`` and waits for the job (see SBATCH_WAIT)."""
    return f"bash -c {shlex.quote(SBATCH_WAIT)} sbatch-wait {args}"


def sbatch_wait(args: list[str], timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """``sbatch --wait ARGS`` that returns as soon as the job has ended (see SBATCH_WAIT)."""
    return subprocess.run(["bash", "-c", SBATCH_WAIT, "sbatch-wait", *args], capture_output=True, text=True,
                          timeout=timeout, **kw)


# The batch scripts of singularity/slurm, one job per mode (TF_SMALL for the TensorFlow modes): what the Slurm
# and Apptainer tiers submit together and then assert on.
SCRIPTED = [
    ("ddp.sbatch", {}, "torch-ddp"),
    ("horovod.sbatch", {}, "tf-horovod"),
    ("horovod.sbatch", {"MODE": "torch-horovod"}, "torch-horovod"),
    ("tf-native.sbatch", {}, "tf-native"),
]
# The TensorFlow modes' runs where the exchange, the launcher, the image or the ending is what is tested: the
# smallest model, whose graph TensorFlow traces about 10 s faster per rank than ResNet-50's (ResNet-50 in
# TensorFlow's ranks: test_hostname and the CUDA image's self-test; VGG-16: verify across the cluster's nodes).
TF_SMALL = ["--model", "transformer-small", "--batch-size", "2", "--seq-len", "8", *SMALL[8:]]


def sbatch_scripted(env: dict[str, str], tmp_path_factory, per_mode: dict[str, dict[str, str]] | None = None,
                    **extra: str) -> dict[str, tuple]:
    """Every SCRIPTED job on one node (2 tasks), submitted together, waited for together:
    {mode: (exit code, stderr and the job's log, results folder, seconds from submission to end)}; ``per_mode``:
    more environment for one mode's job."""
    scripts = ROOT / "singularity" / "slurm"
    jobs = {}
    for script, mode_env, mode in SCRIPTED:
        folder = tmp_path_factory.mktemp(mode)
        job_env = dict(env, HVDBENCH_RESULTS=str(folder / "results"),
                       BENCH_ARGS=" ".join(TF_SMALL if mode.startswith("tf") else SMALL), **extra, **mode_env,
                       **(per_mode or {}).get(mode, {}))
        proc = subprocess.Popen(["bash", "-c", SBATCH_WAIT, "sbatch-wait", "--nodes=1", "--ntasks-per-node=2",
                                 "--cpus-per-task=1", str(scripts / script)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=job_env, cwd=folder)
        jobs[mode] = (proc, folder, time.monotonic())
    done = {}
    for mode, (proc, folder, start) in jobs.items():
        _, stderr = proc.communicate(timeout=1200)
        logs = "\n".join(p.read_text() for p in folder.glob("hvdbench-*.out"))
        done[mode] = (proc.returncode, stderr + logs, folder / "results", time.monotonic() - start)
    return done


def built_image(image: str, make_target: str):
    """The Docker SDK client, once ``image`` is there (the image tests' module fixture)."""
    import docker
    from tools import images

    client = images.client()
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{image} is not built: run 'make {make_target}'")
    return client


def run_container(dk, image: str, args: list[str], results: Path | None = None, timeout: int = 600,
                  stdout_only: bool = False, own_bench: bool = False, **options) -> tuple[int, str]:
    """(exit code, logs) of ``docker run IMAGE ARGS``; ``results`` is mounted at /work/results. ``stdout_only``:
    the container's standard output alone, for structured output (JSON) that other writers' lines (the
    frameworks' logging, on standard error) must not break into. The checkout's bench/ is bound over the
    image's (the gate keeps an image built for an earlier bench: tools/images.py, --cache frameworks) unless
    ``own_bench``: the image's own package, as users get it."""
    from tools import images

    volumes = [f"{results}:/work/results:rw"] if results else []
    if not own_bench:
        volumes += images.bench_binds(image)
    container = dk.containers.run(image, args, volumes=volumes, detach=True, shm_size="1g", **options)
    try:
        code = container.wait(timeout=timeout)["StatusCode"]
        if stdout_only:
            return code, container.logs(stdout=True, stderr=False).decode(errors="replace")
        return code, container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)


# The SHA-256 of every module of the bench package that ``python -I -c BENCH_DIGEST`` imports, with their paths in
# the package: the same in an image and in this checkout where both hold the same bench/.
BENCH_DIGEST = ("import bench, hashlib, pathlib; top = pathlib.Path(bench.__file__).parent; h = hashlib.sha256(); "
                "[h.update(str(p.relative_to(top)).encode() + p.read_bytes()) for p in sorted(top.rglob('*.py'))]; "
                "print(h.hexdigest())")


def checkout_bench_digest() -> str:
    r = subprocess.run([sys.executable, "-c", BENCH_DIGEST], capture_output=True, text=True, cwd=ROOT, check=True)
    return r.stdout.strip()


def has_cuda() -> bool:
    """An NVIDIA GPU is visible (nvidia-smi lists one); no framework is imported to find out."""
    import shutil

    if shutil.which("nvidia-smi") is None:
        return False
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return out.returncode == 0 and "GPU" in out.stdout


# -- tiers (docs/development.md) -------------------------------------------------------------------------
# A test's folder is its tier: tests/unit, tests/framework, tests/multiproc, tests/system, cheapest first. The folder
# gives each test its tier's marker (what the Makefile's tiers select); a test marked with another tier's marker, a
# system test without the marker of what it needs, or a test outside the four folders stops the collection.
# The multiproc tier runs two test files at a time (pytest-xdist); its tests marked ``alone`` read figures of the
# whole host (the bytes its interfaces sent, other processes' CPU, ranks timed against each other) and run after
# the rest, with nothing beside them.
SYSTEM = ("image", "image_cuda", "apptainer", "sif_pull", "cluster", "diagnose", "kubernetes", "slurm", "gpu_check",
          "bare_debian")
TIERS = ("unit", "framework", "multiproc", "system")
FRAMEWORKS = ("torch", "tensorflow", "horovod", "keras", "tf_keras")


def tier_of(path: Path) -> str | None:
    """The tier of the test file at ``path``: the folder under tests/ that holds it (None outside the four)."""
    try:
        parts = Path(path).resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


def misplaced(tier: str | None, marks: set[str]) -> str | None:
    """Why a test with ``marks`` does not belong in ``tier``'s folder, or None where it does."""
    if tier is None:
        return f"a test lives in one of tests/{{{','.join(TIERS)}}}/, the folder of its tier"
    other = sorted(marks & set(TIERS) - {tier})
    if other:
        return f"marked {', '.join(other)} but kept in tests/{tier}/: its folder says its tier, move it"
    needs = sorted(marks & set(SYSTEM))
    if tier == "system" and not needs:
        return f"a system test carries the marker of what it needs (one of {', '.join(SYSTEM)})"
    if tier != "system" and needs:
        return f"marked {', '.join(needs)} (what a system test needs) but kept in tests/{tier}/: move it to system/"
    if "alone" in marks and tier != "multiproc":
        return f"marked alone but kept in tests/{tier}/: only the multiproc tier runs tests two at a time"
    if "smoke" in marks and tier != "system":
        return f"marked smoke but kept in tests/{tier}/: only a system tier has smoke tests (tools/tier_cache.py)"
    return None


@pytest.hookimpl(tryfirst=True)  # before -m selects
def pytest_collection_modifyitems(config, items):
    wrong = []
    for item in items:
        tier = tier_of(item.path)
        why = misplaced(tier, {m.name for m in item.iter_markers()})
        if why:
            wrong.append(f"{item.nodeid}: {why}")
            continue
        item.add_marker(getattr(pytest.mark, tier))
    if wrong:
        raise pytest.UsageError("tests in the wrong tier folder:\n  " + "\n  ".join(wrong))
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


class UnitTierViolation(AssertionError):
    pass


def _no_process(*args, **kwargs):
    raise UnitTierViolation(f"a unit test starts no process ({args[0] if args else kwargs.get('args')!r}): "
                            "mark it multiproc, or test the function in process")


@pytest.fixture(scope="session")
def plot_fonts():
    """matplotlib's font list, made once before any unit test runs: on a machine where it was never made (a new
    one), matplotlib makes it at its first plot by running fc-list, which the unit tier's guard refuses."""
    if importlib.util.find_spec("matplotlib") is not None:
        import matplotlib.font_manager  # noqa: F401  (builds and caches the font list)


@pytest.fixture(autouse=True)
def unit_tier_stays_in_process(request, monkeypatch):
    """A unit test may start no process and import no framework: it fails here if it does."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    request.getfixturevalue("plot_fonts")
    before = {name for name in sys.modules if name.split(".")[0] in FRAMEWORKS}
    monkeypatch.setattr(subprocess, "Popen", _no_process)
    monkeypatch.setattr(os, "system", _no_process)
    yield
    imported = sorted({name.split(".")[0] for name in sys.modules if name.split(".")[0] in FRAMEWORKS} -
                      {name.split(".")[0] for name in before})
    if imported:
        raise UnitTierViolation(f"a unit test imports no framework (this one imported {', '.join(imported)}): "
                                "mark it framework")


@pytest.fixture
def cli(monkeypatch, capsys):
    """``bench ARGS`` in this process, with the run itself replaced: argument handling, validation and the
    one-line error path of `bench.cli.main`, in milliseconds. A command whose validation lets it through to a
    run fails the test. (Each one-line error path also has one real subprocess test.)"""
    import bench.cli
    import bench.launching.supervise
    import bench.run

    def reached(cfg):
        raise AssertionError(f"validation let this through to a run: {cfg}")

    monkeypatch.setattr(bench.run, "run", reached)
    monkeypatch.setattr(bench.launching.supervise, "die_with_parent", lambda: None)  # no parent-death signal on pytest

    def invoke(*args: str) -> subprocess.CompletedProcess:
        monkeypatch.setattr(sys, "argv", ["bench", *args])
        capsys.readouterr()
        try:
            bench.cli.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return subprocess.CompletedProcess(["bench", *args], code, captured.out, captured.err)

    return invoke


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

    from bench.records.schema import json_schema

    validator = jsonschema.Draft202012Validator(json_schema())
    for path in written:
        errors = sorted(validator.iter_errors(json.loads(path.read_text())), key=lambda e: list(e.path))
        assert not errors, f"{path} does not match the result schema: {errors[0].message} at {list(errors[0].path)}"


def _is_result(path: Path) -> bool:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(data, dict) and "run_id" in data and data.get("schema_version") == SCHEMA_VERSION
            and "kind" not in data)
