"""The image recipes without an engine: stacks -> build args, Dockerfile rules, hadolint, compose, CI matrix."""

import subprocess

import pytest
import yaml

from tests.conftest import ROOT
from tools import images

DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()
CUDA_DOCKERFILE = (ROOT / "docker" / "Dockerfile.cuda").read_text()
REQUIRED = {"STACK", "BASE_IMAGE_CPU", "BASE_IMAGE_CUDA", "TORCH_VERSION", "TORCH_INDEX_URL_CPU",
            "TF_PACKAGE_CPU", "TF_PACKAGE_CUDA", "TF_VERSION", "TF_KERAS_VERSION", "HOROVOD_VERSION", "HOROVOD_PATCH"}


def test_stacks_are_complete():
    assert {"current", "classic"} <= set(images.stacks())
    for stack in images.stacks():
        values = images.read_stack(stack)
        assert REQUIRED <= set(values), (stack, REQUIRED - set(values))
        assert values["STACK"] == stack
    classic = images.read_stack("classic")
    assert classic["HOROVOD_PATCH"] == "no" and "11.8" in classic["BASE_IMAGE_CUDA"]
    assert classic["TF_VERSION"].startswith("2.12") and classic["TORCH_VERSION"].startswith("2.0")
    current = images.read_stack("current")
    assert current["HOROVOD_PATCH"] == "yes" and current["TF_VERSION"] == "2.21.0" and current["TF_KERAS_VERSION"]
    # the CUDA flavour: CUDA from PyPI wheels on the same plain Debian base (no nvidia/cuda registry image)
    assert current["BASE_IMAGE_CUDA"] == current["BASE_IMAGE_CPU"] == "debian:bookworm-slim"
    assert current["DOCKERFILE_CUDA"] == "Dockerfile.cuda" and current["TF_PACKAGE_CUDA"] == "tensorflow[and-cuda]"


def test_build_args_pick_the_flavour():
    cpu = images.build_args("current", "cpu")
    cuda = images.build_args("current", "cuda")
    assert cpu["BASE_IMAGE"] == "debian:bookworm-slim" and cpu["TF_PACKAGE"] == "tensorflow-cpu"
    assert cuda["BASE_IMAGE"] == "debian:bookworm-slim" and cuda["TF_PACKAGE"] == "tensorflow[and-cuda]"
    assert cpu["FLAVOR"] == "cpu" and cuda["FLAVOR"] == "cuda"
    assert cuda["DOCKERFILE"] == "Dockerfile.cuda" and cpu["DOCKERFILE"] == "Dockerfile"
    assert not any(k.endswith(("_CPU", "_CUDA")) for k in cpu)
    # every build arg is declared after a FROM, so it reaches the build
    for args, text in ((cpu, DOCKERFILE), (cuda, CUDA_DOCKERFILE)):
        for key in set(args) - {"DOCKERFILE", "TORCH_INDEX_URL"}:
            assert f"ARG {key}" in text.split("FROM", 1)[1], key
    assert images.build_args("current", "cpu", base="hvdbench-base:bookworm")["BASE_IMAGE"] == "hvdbench-base:bookworm"


def test_tags():
    assert images.tags("current", "cuda") == ["hvdbench:current-cuda", "hvdbench:latest"]
    assert images.tags("classic", "cpu") == ["hvdbench:classic-cpu"]


def test_unknown_stack_and_flavor():
    with pytest.raises(images.ImageError, match="unknown stack"):
        images.build_args("nope", "cpu")
    with pytest.raises(images.ImageError, match="unknown flavor"):
        images.build_args("current", "rocm")


def test_dockerfile_rules():
    head, _, body = DOCKERFILE.partition("\nFROM ")
    assert "ARG BASE_IMAGE" in head and "ARG BASE_IMAGE" in body
    assert 'SHELL ["/bin/bash", "-euo", "pipefail", "-c"]' in body
    assert "org.opencontainers.image.version" in body and "io.hvdbench.horovod" in body
    assert "horovodrun --check-build" in body and "bench torch-ddp --device cpu --np 2" in body
    assert 'ENTRYPOINT ["/opt/hvdbench/docker/entrypoint.sh"]' in body
    # the CA bundle is only ever a BuildKit secret
    assert "ca-certificates.crt" not in body and "--mount=type=secret,id=ca" in body
    assert "docker/build-horovod.sh" in body


def test_cuda_dockerfile_rules():
    """Multi-stage: nvcc, cmake and Horovod's build live in the build stage only; the shipped stages copy the two
    framework environments (frameworks), then add what torch.compile builds with (g++, python3-dev) before this
    package, and run the self-test (image)."""
    runtime, build, frameworks, image = (part for part in CUDA_DOCKERFILE.split("\nFROM ")[1:])
    assert runtime.startswith("${BASE_IMAGE} AS runtime") and build.startswith("runtime AS build")
    assert frameworks.startswith("runtime AS frameworks") and image.startswith("${FRAMEWORKS} AS image")
    shipped = frameworks + image
    for tool in ("cmake", "libopenmpi-dev"):
        assert tool in build and tool not in runtime and tool not in shipped
    installs = [line for line in image.splitlines() if "apt-get install" in line]
    assert len(installs) == 1 and installs[0].split("--no-install-recommends")[1].split() == ["g++", "python3-dev",
                                                                                              "\\"], installs
    assert image.index("g++ python3-dev") < image.index("COPY bench")  # a change to bench/ keeps the step
    assert 'torch/bin/pip install "matplotlib==${MATPLOTLIB_VERSION}"' in image
    assert "cuda-toolkit[nvcc,cccl]" in build and "nvcc" not in shipped.split("# Self-test")[0].replace("nvcc ${", "")
    assert build.count("build-horovod.sh /opt/hvdbench/torch/bin/python") == 1  # one Horovod per environment
    assert build.count("build-horovod.sh /opt/hvdbench/tf/bin/python") == 1
    assert "COPY --from=build /opt/hvdbench/torch" in frameworks and "COPY --from=build /opt/hvdbench/tf" in frameworks
    assert "HVDBENCH_PYTHON_TORCH=" in frameworks and "HVDBENCH_PYTHON_TF=" in frameworks
    assert "COPY bench" not in frameworks and "COPY bench" in image  # a change to bench/ rebuilds only the image stage
    assert "bench env --check" in image and "horovodrun --check-build" in image
    assert "ca-certificates.crt" not in CUDA_DOCKERFILE and "--mount=type=secret,id=ca" in build


def test_cpu_dockerfile_puts_bench_after_the_frameworks():
    """The frameworks stage holds everything heavy and nothing of bench/; the image stage adds bench."""
    frameworks, image = DOCKERFILE.split("\nFROM ")[1:]
    assert frameworks.startswith("${BASE_IMAGE} AS frameworks") and image.startswith("${FRAMEWORKS} AS image")
    assert "build-horovod.sh" in frameworks and "COPY bench" not in frameworks
    assert "COPY bench" in image  # and nothing heavy: its one pip install is this package alone, without deps
    assert image.count("pip install") == 1 and "pip install --no-cache-dir --no-deps --no-build-isolation" in image


def test_cluster_node_image_is_built_on_the_frameworks_stage():
    text = (ROOT / "docker" / "cluster" / "Dockerfile").read_text()
    assert "ARG HVDBENCH_IMAGE=hvdbench:current-cpu-frameworks" in text
    assert text.index("slurm-wlm") < text.index("COPY bench")  # bench last: a change to it rebuilds one step


def test_compose_services():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    for mode in ("torch-ddp", "torch-horovod", "tf-horovod", "tf-native"):
        assert services[mode]["command"] == [mode]
        assert services[mode]["profiles"] == ["gpu"]
        assert services[mode]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    for i, node in enumerate(("node0", "node1")):
        assert services[node]["profiles"] == ["two-node"]
        assert f'"index": {i}' in services[node]["environment"]["TF_CONFIG"]


class _Images:
    """The engine's image API as resolve_base sees it: what it has, and whether a registry answers."""

    def __init__(self, have=(), registry=False):
        self.have, self.registry, self.pulled = set(have), registry, []

    def get(self, name):
        import docker

        if name not in self.have:
            raise docker.errors.ImageNotFound(f"No such image: {name}")

    def pull(self, name):
        import docker

        if not self.registry:
            raise docker.errors.APIError('Get "https://registry-1.docker.io/v2/": dial tcp: no such host')
        self.pulled.append(name)


class _Client:
    def __init__(self, **kw):
        self.images = _Images(**kw)


def test_resolve_base_takes_the_stacks_base_when_the_engine_has_or_can_pull_it(monkeypatch):
    monkeypatch.setattr(images, "make_base", lambda tag=images.LOCAL_BASE: pytest.fail("no fallback expected"))
    assert images.resolve_base("debian:bookworm-slim", _Client(have={"debian:bookworm-slim"})) == "debian:bookworm-slim"
    c = _Client(registry=True)
    assert images.resolve_base("nvidia/cuda:12.4.1-devel-ubuntu22.04", c) == "nvidia/cuda:12.4.1-devel-ubuntu22.04"
    assert c.images.pulled == ["nvidia/cuda:12.4.1-devel-ubuntu22.04"]


def test_resolve_base_without_a_registry_falls_back_to_the_debootstrapped_bookworm(monkeypatch, capsys):
    made = []
    monkeypatch.setattr(images, "make_base", lambda tag=images.LOCAL_BASE: made.append(tag) or tag)
    assert images.resolve_base("debian:bookworm-slim", _Client()) == images.LOCAL_BASE
    assert made == [images.LOCAL_BASE]
    assert "cannot pull debian:bookworm-slim" in capsys.readouterr().out


def test_resolve_base_without_a_registry_refuses_a_base_it_cannot_stand_in_for(monkeypatch):
    monkeypatch.setattr(images, "make_base", lambda tag=images.LOCAL_BASE: pytest.fail("no fallback expected"))
    with pytest.raises(images.ImageError, match=r"cannot pull the base image nvidia/cuda:12.4.1-devel-ubuntu22.04"):
        images.resolve_base("nvidia/cuda:12.4.1-devel-ubuntu22.04", _Client())


def test_prune_keeps_the_newest_build_cache_and_removes_untagged_hvdbench_images(monkeypatch, capsys):
    """What the gate calls after its builds (docs/gate.md): the build cache beyond the budget, least
    recently used first, and only this project's untagged images; a refusal is one line."""
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd[1:])
        return subprocess.CompletedProcess(cmd, 0, "Total reclaimed space: 3GB\n", "")
    monkeypatch.setattr(images.subprocess, "run", run)
    images.prune(12)
    assert calls == [["builder", "prune", "--force", "--keep-storage", "12GB"],
                     ["image", "prune", "--force", "--filter", "label=org.opencontainers.image.title=hvdbench"]]
    assert "builder prune: Total reclaimed space: 3GB" in capsys.readouterr().out
    monkeypatch.setattr(images.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, "", "Cannot connect to the Docker daemon\n"))
    with pytest.raises(images.ImageError, match="builder prune failed: Cannot connect"):
        images.prune()


def test_the_gate_keeps_an_image_for_a_change_to_bench_alone(tmp_path, monkeypatch):
    """build --cache frameworks: the key of what an image adds to its frameworks stage, less this package and
    the commit stamp. Any other input, a new frameworks stage or an image retagged since, builds again."""
    ids = {"hvdbench:t-frameworks": "sha256:f1", "hvdbench:t": "sha256:i1"}
    monkeypatch.setattr(images, "image_id", ids.get)
    monkeypatch.setattr(images, "ROOT", tmp_path)
    monkeypatch.setattr(images, "IMAGE_KEYS", tmp_path / "keys")
    files = [tmp_path / "Dockerfile", tmp_path / "entrypoint.sh"]
    for path in files:
        path.write_text(path.name)
    args = {"STACK": "t", "HVDBENCH_REVISION": "abc", "HVDBENCH_SOURCE": ""}

    def key(**more):
        return images.package_key("hvdbench:t-frameworks", files, {**args, **more})

    assert not images.kept("hvdbench:t", key())  # never built with a key
    images.remember("hvdbench:t", key())
    assert images.kept("hvdbench:t", key())
    assert images.kept("hvdbench:t", key(HVDBENCH_REVISION="def", HVDBENCH_SOURCE="https://x"))  # a new commit
    assert not images.kept("hvdbench:t", key(STACK="u"))  # a build arg
    files[1].write_text("changed")
    assert not images.kept("hvdbench:t", key())  # a file the image stage copies
    files[1].write_text("entrypoint.sh")
    ids["hvdbench:t-frameworks"] = "sha256:f2"
    assert not images.kept("hvdbench:t", key())  # the frameworks stage
    ids["hvdbench:t-frameworks"] = "sha256:f1"
    assert images.kept("hvdbench:t", key())
    ids["hvdbench:t"] = "sha256:i2"  # make image or make publish built another under the name since
    assert not images.kept("hvdbench:t", key())
    # bench/ is in no key: the gate binds it (tests/conftest.py run_container, tools/cluster.py)
    assert not [p for p in images.PACKAGE_FILES if "bench" in p.relative_to(ROOT).parts]


def test_the_cluster_binds_a_checkouts_bench_over_every_nodes(tmp_path, monkeypatch):
    from tools import cluster

    monkeypatch.setattr(images, "package_dirs", lambda image: ("/opt/venv/lib/python3.11/site-packages/bench",))
    monkeypatch.setenv("HVDBENCH_CLUSTER_BENCH", str(ROOT / "bench"))
    assert cluster.bound_bench() == ROOT / "bench"
    compose = yaml.safe_load(cluster.bench_file(("node1", "node2", "node3"), cluster.bound_bench()).read_text())
    bind = f"{ROOT / 'bench'}:/opt/venv/lib/python3.11/site-packages/bench:ro"
    assert compose["services"] == {n: {"volumes": [bind]} for n in ("head", "node1", "node2", "node3")}
    monkeypatch.setenv("HVDBENCH_CLUSTER_BENCH", str(tmp_path))
    with pytest.raises(images.ImageError, match="is not a bench package directory"):
        cluster.bound_bench()
    monkeypatch.delenv("HVDBENCH_CLUSTER_BENCH")
    assert cluster.bound_bench() is None and "bench.yaml" not in " ".join(cluster.compose_cmd())


def test_the_clusters_files_are_rewritten_only_when_they_change(tmp_path, monkeypatch):
    """Every compose command makes the cluster's slurm.conf and shape again: a file that holds the same is left
    alone (a rewrite empties it for an instant, and a node starting then read an empty slurm.conf and died);
    another shape rewrites it."""
    from tools import cluster

    monkeypatch.setattr(cluster.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(cluster, "shared_dir", lambda: tmp_path / "shared")
    nodes = ("node1", "node2", "node3", "node4")
    shape = cluster.shape_file(nodes, 0.4)
    conf = tmp_path / f"{cluster.PROJECT}-slurm.conf"
    assert "NodeName=node[1-4]" in conf.read_text()
    writes = []
    monkeypatch.setattr(type(conf), "write_text", lambda self, text, *a, **k: writes.append(self.name))
    assert cluster.shape_file(nodes, 0.4) == shape and writes == []  # the same: neither file touched
    cluster.shape_file(nodes[:3], 0.4)
    assert sorted(writes) == sorted([conf.name, shape.name])


def test_a_staged_torch_wheel_is_not_downloaded_again(tmp_path, monkeypatch):
    version = images.build_args("current", "cpu")["TORCH_VERSION"]
    downloads = []

    def run(argv, check):
        downloads.append(argv)
        (tmp_path / f"torch-{version}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_text("")

    monkeypatch.setattr(images, "WHEELHOUSE", tmp_path)
    monkeypatch.setattr(images, "stage_sdist", lambda stack, python: None)
    monkeypatch.setattr(images, "has_pip", lambda python: True)
    monkeypatch.setattr(images.subprocess, "run", run)
    monkeypatch.setenv("HVDBENCH_WHEEL_CACHE", str(tmp_path / "no-cache"))
    images.stage_wheels("current")
    assert len(downloads) == 1 and "download" in downloads[0]
    images.stage_wheels("current")
    assert len(downloads) == 1  # the pinned wheel was there


def test_the_cpu_image_without_pip_is_one_line(monkeypatch):
    """make image FLAVOR=cpu with no venv and a python3 without pip: what to install, before any build."""
    monkeypatch.setattr(images, "has_pip", lambda python: False)
    with pytest.raises(images.ImageError, match="has none: install python3-pip"):
        images.stage_wheels("current", python="/usr/bin/python3")



def test_an_unchanged_frameworks_stage_is_not_built_again_and_the_image_goes_on_from_its_tag(tmp_path, monkeypatch):
    """`build --cache frameworks`: the frameworks stage is built once and then kept while its inputs (the files
    its steps read, the staged wheels, the args) are the same; the image always goes on from the frameworks tag
    (FRAMEWORKS), so its build never runs the frameworks stage's steps again; a changed input builds it again."""
    import subprocess as sp

    from tools import images

    built, builds = [], {}

    def docker(step, **_):  # a build gives its tags a new image ID
        built.append(next(step[i + 1] for i, a in enumerate(step) if a == "--target"))
        built.append([a for a in step if a.startswith("FRAMEWORKS=")])
        for t in (step[i + 1] for i, a in enumerate(step) if a == "-t"):
            builds[t] = builds.get(t, 0) + 1
        return sp.CompletedProcess(step, 0)

    requirements = tmp_path / "requirements-image.txt"
    requirements.write_text("typer==0.29.2\n")
    (tmp_path / "wheelhouse").mkdir()
    (tmp_path / "wheelhouse" / "torch.whl").write_bytes(b"wheel")
    monkeypatch.setattr(images, "IMAGE_KEYS", tmp_path / "keys")
    monkeypatch.setattr(images, "FRAMEWORKS_FILES", (requirements,))
    monkeypatch.setattr(images, "WHEELHOUSE", tmp_path / "wheelhouse")
    monkeypatch.setattr(images, "stage_wheels", lambda stack: tmp_path / "wheelhouse")
    monkeypatch.setattr(images, "resolve_base", lambda base: base)
    monkeypatch.setattr(images, "image_id", lambda tag: f"sha256:{tag}:{builds.get(tag, 0)}")
    monkeypatch.setattr(images.subprocess, "run", docker)
    monkeypatch.setattr(images, "stamp", lambda: {"HVDBENCH_REVISION": "r1", "HVDBENCH_SOURCE": ""})

    def build():
        built.clear()
        images.build("current", "cpu", base="hvdbench-base:bookworm", cache="frameworks")
        return list(built)

    tag = ["FRAMEWORKS=hvdbench:current-cpu-frameworks"]
    assert build() == ["frameworks", [], "image", tag]  # the first time: both, the image on the tag
    assert build() == []  # nothing changed: neither
    requirements.write_text("typer==0.30.0\n")
    assert build() == ["frameworks", [], "image", tag]  # the frameworks stage read it: both again
    (tmp_path / "wheelhouse" / "torch.whl").write_bytes(b"another wheel")
    assert build()[0] == "frameworks"


def test_the_frameworks_key_reads_the_args_its_stage_declares(tmp_path, monkeypatch):
    """An ARG the frameworks stage declares (or one before the first FROM) changes its key; one only the image
    stage declares (the CUDA image's MATPLOTLIB_VERSION) cannot change the frameworks, and leaves the key as it is
    (before, any new build arg built the CUDA frameworks again: an hour here)."""
    from tools import images

    monkeypatch.setattr(images, "FRAMEWORKS_FILES", ())
    monkeypatch.setattr(images, "image_id", lambda tag: "sha256:base")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("ARG BASE_IMAGE=x\nFROM ${BASE_IMAGE} AS frameworks\nARG TORCH_VERSION\nRUN true\n"
                          "FROM ${FRAMEWORKS} AS image\nARG MATPLOTLIB_VERSION\nRUN true\n")
    (tmp_path / "staged").mkdir()

    def key(**args):
        return images.frameworks_key(dockerfile, tmp_path / "staged", {"BASE_IMAGE": "b", "TORCH_VERSION": "2",
                                                                        **args})

    first = key()
    assert key(MATPLOTLIB_VERSION="3.11.2") == first and key(SELF_TEST_MODES="torch-ddp") == first
    assert key(TORCH_VERSION="3") != first and key(BASE_IMAGE="c") != first
