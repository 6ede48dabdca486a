"""The container contract: what README and docs/first-run.md tell a user to run works inside each image.

One container runs every command of README's command table in turn, each as `docker run IMAGE ARGS` starts it
(the image's entry point), at tiny settings on the CPU image and on the CUDA image's CPU path (no GPU here), and
the test then reads what each wrote, with the checks a user's own reading would make: a result that says ok, the
report's page drawn by headless Chromium from the host, the compile time of a --tuned run. The SIF made from the
CPU image runs the same steps in one `apptainer exec` (the apptainer tier). docs/images.md's matrix names the
commands as this file runs them.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, bench_env, built_image, run_container
from tests.system.test_apptainer import (  # noqa: F401 (fixtures)
    apptainer,
    env,
    host_env,
    image_sif,
    package_path,
    sif,
    with_apptainer,
)

# The contract reruns with every change to the image or to bench/ (smoke): what users run is what is tested. Its
# steps run one after another in one container: the bound is a deadlock guard, several times their time here.
pytestmark = [pytest.mark.smoke, pytest.mark.timeout(2400)]

IMAGE = os.environ.get("HVDBENCH_TEST_IMAGE", "hvdbench:current-cpu")
# Inside the container: the results folder mounted from the host.
R = "/work/results"
# Tiny, and the same in every step that trains an image model: ResNet-20 at 32x32, two windows of two steps.
TINY = ("--model resnet20 --image-size 32 --batch-size 2 --num-classes 10 --warmup-steps 1 --steps-per-window 2 "
        "--windows 2 --device cpu --no-telemetry")
SWEPT = "--models resnet20 --image-size 32 --batch-sizes 2 --warmup-steps 1 --steps-per-window 2 --windows 2 " \
        "--device cpu"
RUN_FILE = {"mode": "torch-single", "model": "resnet20", "image_size": 32, "batch_size": 2, "num_classes": 10,
            "warmup_steps": 1, "steps_per_window": 2, "windows": 2, "device": "cpu", "telemetry": False,
            "output": f"{R}/run-file"}


def results(folder: Path) -> dict[str, dict]:
    """The results a folder holds, by mode, each as its file holds it after bench has read it back as its model."""
    from bench.records.results import load_result

    found = {}
    for path in sorted(folder.glob("*.json")):
        load_result(path)
        record = json.loads(path.read_text())
        found[record["mode"]] = record
    return found


def ok_run(folder: Path, mode: str) -> dict:
    record = results(folder).get(mode)
    assert record is not None, f"no {mode} result in {folder}"
    assert record["status"] == "ok", record.get("error")
    assert record["summary"]["samples_per_sec_total"] > 0
    return record


def check_modes(out: Path, _: str) -> None:
    for mode in ("torch-ddp", "torch-horovod", "tf-horovod", "tf-native"):
        record = ok_run(out / "modes", mode)
        assert record["world_size"] == 2 and record["sync"]["ranks_in_sync"], record["sync"]


def check_report(out: Path, _: str) -> None:
    page = out / "report" / "report.html"
    text = page.read_text()
    assert text.count('src="data:image/png;base64,') == 2  # the speedup and efficiency plots, inside the page
    assert (out / "report" / "report.md").is_file() and (out / "report" / "report.csv").is_file()


def check_tuned(out: Path, _: str) -> None:
    record = ok_run(out / "tuned", "torch-single")
    assert record["config"]["profile"] == "cpu-tuned" and record["config"]["compile"] == "default"
    assert record["timing"]["compile_s"] > 0 and record["timing"]["graphs_compiled_in_windows"] == 0


def check_xla(out: Path, _: str) -> None:
    record = ok_run(out / "xla", "tf-single")
    assert record["config"]["xla"] is True and record["timing"]["compile_s"] > 0


def check_trace(out: Path, _: str) -> None:
    record = ok_run(out / "trace", "torch-single")
    files = [f for rank in record["trace"]["per_rank"] for f in rank["files"]]
    assert files and all((out / "trace" / f).stat().st_size > 0 for f in files)


def check_data_run(out: Path, _: str) -> None:
    record = ok_run(out / "data-run", "torch-ddp")
    assert record["config"]["data"] == f"{R}/data"


def one_record(folder: Path, pattern: str) -> dict:
    files = sorted(folder.glob(pattern))
    assert len(files) == 1, (folder, [f.name for f in folder.iterdir()] if folder.is_dir() else None)
    return json.loads(files[0].read_text())


def check_verify(out: Path, _: str) -> None:
    assert one_record(out / "verify", "*-verify-*.json")["passed"] is True


def check_converge(out: Path, _: str) -> None:
    assert one_record(out / "converge", "*-converge-*.json")["verdict"] == "PASS"


def check_json(out: Path, name: str) -> None:
    json.loads((out / "steps" / f"{name}.out").read_text())


def says(*words: str) -> Callable[[Path, str], None]:
    def check(out: Path, name: str) -> None:
        text = (out / "steps" / f"{name}.out").read_text()
        assert all(w in text for w in words), (words, text[-2000:])
    return check


def wrote(folder: str, pattern: str = "*.json") -> Callable[[Path, str], None]:
    def check(out: Path, name: str) -> None:
        assert list((out / folder).glob(pattern)), f"{name}: nothing like {pattern} in {folder}"
    return check


def check_history_add(out: Path, name: str) -> None:
    # every result of both folders, and nothing else: the sweep's manifest and its cells' configs are no records
    runs = [p for folder in ("modes", "sweep") for p in (out / folder).glob("*.json") if p.name != "manifest.json"]
    says(f"history: {len(runs)} added, 0 already there, 0 not read")(out, name)


def check_history_show(out: Path, name: str) -> None:
    says("torch-ddp resnet20")(out, name)
    assert (out / "history.png").stat().st_size > 5000


def check_history_export(out: Path, _: str) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    files = list((out / "textfiles").glob("hvdbench_*.prom"))
    assert len(files) == 1, files  # one node: the container
    names = {family.name for family in text_string_to_metric_families(files[0].read_text())}
    assert {"hvdbench_throughput_samples_per_second", "hvdbench_node_accepted"} <= names, names


@dataclass(frozen=True)
class Step:
    name: str
    args: str  # bench's arguments as a shell would read them ($R: the results folder)
    check: Callable[[Path, str], None] | None = None


def check_hybrid(out: Path, _: str) -> None:
    record = ok_run(out / "hybrid", "torch-hybrid")
    assert record["world_size"] == 2 and record["sync"]["ranks_in_sync"]


STEPS = [
    Step("version", "--version", says("hvdbench")),
    Step("env", "env --json", check_json),
    Step("schema", "schema", check_json),
    Step("models", "models", says("resnet50", "vgg16", "transformer")),
    *(Step(mode, f"{mode} {TINY} --np 2 --output $R/modes") for mode in ("torch-ddp", "torch-horovod",
                                                                          "tf-horovod", "tf-native")),
    Step("hybrid", "torch-hybrid --model transformer-small --num-classes 1000 --batch-size 4 --seq-len 16 --np 2 "
         "--warmup-steps 1 --steps-per-window 2 --windows 2 --device cpu --no-telemetry --output $R/hybrid",
         check_hybrid),
    Step("run-file", "run $R/run.json", lambda out, _: ok_run(out / "run-file", "torch-single")),
    Step("sweep", f"sweep --modes torch-ddp --np 1,2 {SWEPT} --output $R/sweep"),
    Step("report", "report $R/sweep --html --output $R/report", check_report),
    Step("compare", "compare $R/sweep $R/sweep --rules default", says("rules (default): no findings")),
    Step("tuned", f"torch-single {TINY} --tuned --output $R/tuned", check_tuned),
    Step("xla", f"tf-single {TINY} --xla --output $R/xla", check_xla),
    Step("trace", f"torch-single {TINY} --trace 1 --output $R/trace", check_trace),
    Step("data-make", "data make $R/data --images 40 --classes 2 --image-size 40", wrote("data", "train/*/*")),
    Step("data-run", f"torch-ddp {TINY} --np 2 --data $R/data --output $R/data-run", check_data_run),
    Step("data-bench", "data bench $R/data --loaders torch --workers 1 --image-size 32 --batch-size 4 --batches 2 "
         "--warmup 1 --repeats 1 --output $R/data-bench", wrote("data-bench", "**/*.json")),
    # converge on the dataset made above: `data make --from digits` needs scikit-learn, which no image holds
    Step("converge", "converge --modes torch-ddp --np 2 --repeats 1 --data $R/data --epochs 1 "
         "--target-accuracy 0.05 --image-size 32 --device cpu --output $R/converge", check_converge),
    Step("tune", "tune torch-single --model resnet20 --image-size 32 --start 2 --max-batch 4 --warmup-steps 1 "
         "--steps-per-window 2 --windows 2 --device cpu --output $R/tune", wrote("tune", "*-tune-*.json")),
    Step("preflight", "preflight --json", check_json),
    Step("verify", "verify --framework torch --modes torch-ddp --steps 2 --device cpu --output $R/verify",
         check_verify),
    Step("allreduce", "allreduce --np 2 --max-bytes 64K --models '' --samples 2 --device cpu --output $R/allreduce",
         wrote("allreduce")),
    Step("predict", "predict --result \"$(ls $R/run-file/*.json | head -n 1)\" --busbw 10 --latency-us 10 "
         "--gpus 1,8", says("8")),
    Step("peak", "peak --device cpu --seconds 0.1 --repeats 1 --output $R", wrote("peak")),
    Step("soak", "soak --device cpu --seconds 2 --window 0.5 --size 256 --output $R", wrote("soak")),
    Step("k8s", "k8s torch-ddp --image hvdbench:current-cuda --nodes 2 --gpus-per-node 1", says("kind:")),
    # the runs above into the results database (results/history.db), read back, exported for Prometheus
    Step("history-add", "history add $R/modes $R/sweep --results $R", check_history_add),
    Step("history-show", "history show --results $R --cell torch-ddp --plot $R/history.png", check_history_show),
    Step("history-export", "history export prometheus $R/textfiles --results $R --stale-days 100000",
         check_history_export),
]


def script(bench: str, results: str = R, steps: list[Step] = STEPS) -> str:
    """The ``steps`` in turn, ``bench`` starting each (the image's entry point, or `bench` in a SIF), ``results``
    the folder they write in: each step's standard output, error and exit status under its steps/. A step that
    fails does not stop the next."""
    lines = [f"R={results}", "mkdir -p $R/steps"]
    for step in steps:
        lines.append(f"{bench} {step.args} > $R/steps/{step.name}.out 2> $R/steps/{step.name}.err; "
                     f"echo $? > $R/steps/{step.name}.rc")
    return "\n".join(lines) + "\n"


def prepare(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o777)
    (out / "run.json").write_text(json.dumps(RUN_FILE))


def check_steps(out: Path, steps: list[Step] = STEPS) -> None:
    """Every step exited 0 and passes its check; all failures named at once, each with its last lines."""
    failed = []
    for step in steps:
        rc = (out / "steps" / f"{step.name}.rc").read_text().strip()
        if rc != "0":
            err = (out / "steps" / f"{step.name}.err").read_text(errors="replace")
            failed.append(f"{step.name} (bench {step.args}): exit {rc}\n{err[-1500:]}")
            continue
        if step.check is not None:
            try:
                step.check(out, step.name)
            except (AssertionError, OSError, KeyError, ValueError) as exc:
                failed.append(f"{step.name} (bench {step.args}): {type(exc).__name__}: {exc}")
    assert not failed, "\n\n".join(failed)


def screenshot(page: Path, name: str) -> Path | None:
    """The page drawn by headless Chromium on the host (make test-browser installs it), kept in
    results/test-artifacts/NAME.png to be looked at; None where no Chromium is installed."""
    from PIL import Image

    chromium = shutil.which("chromium")
    if chromium is None:
        return None
    shot = ROOT / "results" / "test-artifacts" / f"{name}.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    profile = page.parent / ".chromium-profile"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={profile}", "--window-size=1280,2000", f"--screenshot={shot}",
                    page.as_uri()], check=True, timeout=120, capture_output=True)
    image = Image.open(shot).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20)
    blue = sum(n for n, c in colours if all(abs(a - b) <= 12 for a, b in zip(c, (31, 119, 180), strict=True)))
    assert blue > 2000, f"{shot}: the plots were not drawn"  # matplotlib's first line colour
    return shot


def in_the_image(image: str, make_target: str, steps: list[Step], out: Path, shot: str) -> None:
    """The steps in one container of ``image``, each as the image's entry point starts it, then checked."""
    dk = built_image(image, make_target)
    prepare(out)
    code, logs = run_container(dk, image, ["-c", script("/opt/hvdbench/docker/entrypoint.sh", steps=steps)], out,
                               timeout=2100, entrypoint=["/bin/bash"])
    assert code == 0, logs[-3000:]
    check_steps(out, steps)
    page = screenshot(out / "report" / "report.html", shot)
    print(f"screenshot: {page or 'none (no chromium on this host)'}")


@pytest.mark.image
def test_every_command_of_the_readme_runs_in_the_image(tmp_path):
    in_the_image(IMAGE, "test-image", STEPS, tmp_path / "results", "contract-cpu-report")


# The CUDA image on its CPU path (no GPU here): every step but torch-hybrid, whose TorchRec the CUDA flavour does
# not carry (docker/stacks/current.env: PyPI has no CUDA fbgemm-gpu for this torch; docs/images.md).
CUDA_IMAGE = os.environ.get("HVDBENCH_TEST_CUDA_IMAGE", "hvdbench:current-cuda")
CUDA_STEPS = [step for step in STEPS if step.name != "hybrid"]


@pytest.mark.image_cuda
def test_every_command_of_the_readme_runs_in_the_cuda_image(tmp_path):
    in_the_image(CUDA_IMAGE, "test-image-cuda", CUDA_STEPS, tmp_path / "results", "contract-cuda-report")


def in_the_sif(image: Path, e: dict, steps: list[Step], out: Path, shot: str) -> None:
    """The steps in one `apptainer exec` of the SIF ``image``, each started as `apptainer exec hvdbench.sif bench ARGS`
    starts it (no entry point: the SIF's own `bench`), then checked."""
    prepare(out)
    r = apptainer(e, "exec", "--bind", f"{out}:{R}", str(image), "bash", "-c", script("bench", steps=steps),
                  timeout=2100)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    check_steps(out, steps)
    page = screenshot(out / "report" / "report.html", shot)
    print(f"screenshot: {page or 'none (no chromium on this host)'}")


@pytest.mark.apptainer
def test_every_command_of_the_readme_runs_in_the_sif(env, sif, tmp_path):  # noqa: F811 (fixtures)
    """The SIF made from the CPU image, as a cluster user runs it."""
    in_the_sif(sif, env, STEPS, tmp_path / "results", "contract-sif-report")


# The CUDA SIF is built once per frameworks stage of the CUDA image (make test's set-up builds it beside the first
# tiers: 671 s here beside them, docs/measured/2026-12-07-cuda-sif-contract.md); where it is not built yet, this test
# builds it first, on top of the steps' 10 minutes: a longer deadlock guard.
@pytest.mark.image_cuda
@pytest.mark.timeout(5400)
def test_every_command_of_the_readme_runs_in_the_cuda_sif(tmp_path):
    """The SIF made from the CUDA image (`make sif FLAVOR=cuda`), as a cluster user runs it, on its CPU path: the
    CUDA image's steps, in one `apptainer exec`."""
    from tools import images

    built_image(CUDA_IMAGE, "test-image-cuda")
    e = with_apptainer(bench_env())
    # this checkout's bench over both of the SIF's (its torch and tf environments): where the image holds them
    binds = ",".join(images.bench_binds(CUDA_IMAGE))
    in_the_sif(image_sif(e, "cuda"), dict(e, APPTAINER_BIND=binds), CUDA_STEPS, tmp_path / "results",
               "contract-cuda-sif-report")


@pytest.mark.image
def test_the_steps_name_every_command_of_the_readme():
    """The contract covers README's command table: each bench command it names is one of the steps' commands."""
    import re

    table = (ROOT / "README.md").read_text().split("## Every command", 1)[1].lstrip().split("\n\n", 1)[0]
    named = set()
    for cell in (line.split("|")[1] for line in table.splitlines()[2:] if "`bench " in line.split("|")[1]):
        for words in (chunk.split() for chunk in re.findall(r"`([^`]+)`", cell)):
            words = words[1:] if words[0] == "bench" else words
            if words and not words[0].startswith("-"):  # a command, not a run option
                named.add(words[0])
    ran = {shlex.split(step.args)[0] for step in STEPS}
    assert {"torch-ddp", "report", "data", "k8s"} <= named  # the table was read
    # diagnose starts job steps on an allocation's nodes, from outside a container (the diagnose tier tests it in
    # the node image; the apptainer tier with its steps in the SIF: --container)
    missing = named - ran - {"diagnose"}
    assert not missing, missing
