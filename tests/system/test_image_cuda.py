"""The CUDA image, built here without a GPU: `make test-image-cuda` builds it first (docker/Dockerfile.cuda).

Its build already ran the self-test (Horovod's build check per environment, bench env --check, a 2-process CPU
run of every mode); these tests check what a user meets: the message without a GPU, the two environments,
the libraries each framework's process loads, the labels, torch.compile's compilers but no build tools of
Horovod's, and no secrets in the shipped image.
"""

import json
import os
from pathlib import Path

import pytest

from bench.launching.envs import MIN_DRIVER
from tests.conftest import (
    BENCH_DIGEST,
    ROOT,
    SMALL,
    assert_valid_run,
    built_image,
    checkout_bench_digest,
    only_result,
    run_container,
    tool,
)
from tools import images

pytestmark = pytest.mark.image_cuda

IMAGE = os.environ.get("HVDBENCH_TEST_CUDA_IMAGE", "hvdbench:current-cuda")
CA = os.environ.get("HVDBENCH_CA_BUNDLE", images.DEFAULT_CA)


@pytest.fixture(scope="module")
def dk():
    return built_image(IMAGE, "test-image-cuda")


def run(dk, args, results: Path | None = None, timeout: int = 600, **options):
    return run_container(dk, IMAGE, args, results, timeout, **options)


def test_without_a_gpu_it_says_how_to_run(dk, tmp_path):
    """`docker run hvdbench tf-horovod` with no --gpus: one line that names --gpus all, the driver and --device
    cpu; exit 1 and no result."""
    results = tmp_path / "results"
    results.mkdir()
    for mode in ("torch-ddp", "tf-horovod"):
        code, logs = run(dk, [mode, "--output", "/work/results"], results)
        errors = [line for line in logs.splitlines() if line.startswith("error:")]
        assert code == 1 and len(errors) == 1, logs
        for words in ("no GPU is visible", "--gpus all", MIN_DRIVER, "--device cpu"):
            assert words in errors[0], (words, errors[0])
        assert "Traceback" not in logs
    assert not list(results.iterdir())


def test_each_framework_in_its_environment_with_its_own_libraries(dk):
    code, stdout = run(dk, ["env", "--json", "--check"], stdout_only=True)
    assert code == 0, stdout[-3000:]
    record = json.loads(stdout)  # standard output alone: TensorFlow's log lines go to standard error
    parts = record["environments"]
    assert parts["torch"]["prefix"] == "/opt/hvdbench/torch" and parts["tensorflow"]["prefix"] == "/opt/hvdbench/tf"
    for name, part in parts.items():
        libs = part["loaded_libraries"]
        assert len(libs["nccl"]) == 1 and libs["nccl"][0].startswith(part["prefix"] + "/"), (name, libs)
        assert len(libs["cudart"]) == 1 and libs["cudart"][0].startswith(part["prefix"] + "/"), (name, libs)
        assert part["horovod"]["nccl_built"] and part["horovod"]["mpi_built"] and part["horovod"]["gloo_built"]
    assert parts["torch"]["loaded_libraries"]["cudart"][0].endswith("libcudart.so.13")  # CUDA 13 for PyTorch
    assert parts["tensorflow"]["loaded_libraries"]["cudart"][0].endswith("libcudart.so.12")  # CUDA 12 for TF
    assert record["torch"]["cuda"].startswith("13.") and record["tensorflow"]["cuda"].startswith("12.")


@pytest.mark.smoke
@pytest.mark.parametrize("env", ["torch", "tf"])
def test_both_environments_run_this_checkouts_bench(dk, env):
    """Each framework environment's bench is this checkout's, to the byte (run_container binds it over the
    image's: the gate keeps an image built for an earlier bench/, tools/images.py --cache frameworks)."""
    code, out = run(dk, ["-I", "-c", BENCH_DIGEST], entrypoint=f"/opt/hvdbench/{env}/bin/python", stdout_only=True)
    assert code == 0 and out.strip() == checkout_bench_digest(), out[-2000:]


@pytest.mark.smoke
@pytest.mark.parametrize("mode", ["torch-horovod", "tf-native"])
def test_a_cpu_run_is_labelled_cpu(dk, tmp_path, mode):
    results = tmp_path / "results"
    results.mkdir()
    code, logs = run(dk, [mode, *SMALL, "--device", "cpu", "--np", "2", "--output", "/work/results"], results)
    assert code == 0, logs[-3000:]
    result = only_result(results)
    assert_valid_run(result, mode, 2, "self")
    assert result["config"]["device"] == "cpu"
    assert result["environment"]["image"]["flavor"] == "cuda"
    framework_env = "/opt/hvdbench/tf" if mode.startswith("tf") else "/opt/hvdbench/torch"
    assert result["environment"]["environment"] == framework_env
    # the most common first run: without a GPU, TensorFlow's start-up lines (cuInit's failure among them) stay quiet
    assert not [line for line in logs.splitlines() if "cuInit" in line or "absl::InitializeLog" in line
                or "oneDNN custom operations" in line], logs[-3000:]


def test_what_torch_compile_builds_with_and_no_build_tool_of_horovods(dk):
    """torch.compile's compilers and Python.h are shipped (--tuned; the contract runs it); nvcc, cmake, make,
    the CUDA toolkit and TensorFlow's headers, which built Horovod, are not."""
    code, logs = run(dk, ["-c", "for t in g++ gcc nvcc cmake make; do printf '%s=%s\\n' $t \"$(command -v $t)\"; "
                          "done; /opt/hvdbench/torch/bin/python -c 'import sysconfig, os; "
                          "print(\"Python.h=\", os.path.isfile(sysconfig.get_paths()[\"include\"] + \"/Python.h\"))'; "
                          "ls /opt/cuda 2>&1; "
                          "ls /opt/hvdbench/tf/lib/python3.11/site-packages/tensorflow/include 2>&1; true"],
                     entrypoint=["/bin/bash"])
    assert code == 0
    found = dict(line.split("=", 1) for line in logs.splitlines() if "=" in line)
    assert found["g++"] == "/usr/bin/g++" and found["gcc"] == "/usr/bin/gcc" and found["Python.h"] == " True", logs
    assert found["nvcc"] == found["cmake"] == found["make"] == "", logs
    assert logs.count("No such file or directory") == 2, logs


def test_labels_name_the_versions(dk):
    labels = dk.images.get(IMAGE).labels
    stack = images.build_args("current", "cuda")
    assert labels["io.hvdbench.flavor"] == "cuda" and labels["io.hvdbench.torch"] == stack["TORCH_VERSION"]
    assert labels["io.hvdbench.driver-min"] == MIN_DRIVER
    assert stack["HOROVOD_BUILD_CUDA_CC_LIST"] in labels["io.hvdbench.horovod-cuda"]


def test_no_secret_in_any_layer(dk):
    if not Path(CA).is_file():
        pytest.skip(f"no CA bundle at {CA}")
    assert images.check_secrets(IMAGE, CA) == []


def test_the_partly_self_tested_image_is_not_published(dk):
    """This tier builds the image with two modes' self-test (--self-test-modes): its marker says so, and
    tools/publish.py refuses it in one line before it asks any registry."""
    import subprocess

    marker = images.image_file(IMAGE, "/opt/hvdbench/self-test").decode()
    assert "self-test: passed" in marker and "complete: no" in marker, marker
    r = subprocess.run([*tool("publish"), "--registry", "127.0.0.1:5999/refused",
                        "--image", IMAGE, "--stack", "current", "--flavor", "cuda"], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "ran only part of its self-test (modes: torch-ddp tf-horovod)" in r.stderr and "nothing pushed" in r.stderr


def test_commands_over_ssh_get_the_images_environment(dk):
    """The MPIJob worker's side (docs/kubernetes.md): as mpiuser, the image's sshd from its own configuration,
    and a command over SSH finds bench and both framework environments (without the SetEnv line it would get
    sshd's bare PATH and no bench)."""
    script = ('set -e; mkdir /tmp/k; ssh-keygen -q -t ecdsa -b 521 -m PEM -N "" -f /tmp/k/id_rsa; '
              "cp /tmp/k/id_rsa.pub /tmp/k/authorized_keys; /usr/sbin/sshd -f /home/mpiuser/.sshd_config "
              "-o HostKey=/tmp/k/id_rsa -o AuthorizedKeysFile=/tmp/k/authorized_keys -o PidFile=/tmp/k/pid "
              "2>/dev/null; ssh -i /tmp/k/id_rsa 127.0.0.1 "
              "'id -un; command -v bench; echo $HVDBENCH_PYTHON_TF; echo $HVDBENCH_IMAGE_FLAVOR'")
    code, out = run(dk, ["-c", script], user="1000:1000", entrypoint="bash", stdout_only=True)
    assert code == 0, out
    assert out.split() == ["mpiuser", "/opt/hvdbench/torch/bin/bench", "/opt/hvdbench/tf/bin/python", "cuda"]


def test_its_input_pipelines_read_a_dataset_on_the_cpu(dk, tmp_path):
    """The CUDA image carries the loaders --data takes (docs/data.md): Pillow for the torch loader and NVIDIA DALI
    in each environment, built for its CUDA; DALI's CPU pipeline and Pillow feed a run here, with no GPU."""
    results = tmp_path / "results"
    results.mkdir()
    common = "--device cpu --data /tmp/d --model resnet20 --image-size 32 --batch-size 4 --warmup-steps 1 " \
             "--steps-per-window 2 --windows 1"
    script = " && ".join([
        "bench data make /tmp/d --images 24 --image-size 48 --classes 4",
        f"bench torch-single {common} --loader dali --output /work/results/torch-dali",
        f"bench tf-single {common} --loader dali --output /work/results/tf-dali",
        f"bench torch-single {common} --loader torch --output /work/results/torch-pillow"])
    code, logs = run(dk, ["-c", script], results, entrypoint="bash")
    assert code == 0, logs[-3000:]
    for folder, loader in (("torch-dali", "dali"), ("tf-dali", "dali"), ("torch-pillow", "torch")):
        result = only_result(results / folder)
        assert result["input"]["loader"] == loader and result["input"]["format"] == "imagefolder", folder
        assert result["input"]["per_rank"][0]["loader_rate"] > 0
    assert dk.images.get(IMAGE).labels["io.hvdbench.dali"] == images.build_args("current", "cuda")["DALI_VERSION"]
