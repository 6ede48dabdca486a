"""The Singularity/Apptainer recipes: generated from docker/ by spython, in sync, complete.

The SIFs themselves are built and run by tests/system/test_apptainer.py (the system tier).
"""

import hashlib
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

recipes = pytest.importorskip("tools.recipes")
DEFS = sorted((ROOT / "singularity").glob("hvdbench-*.def"))


def test_every_stack_and_flavour_has_a_definition():
    """Every stack x flavour built from docker/Dockerfile; current-cuda (the multi-stage Dockerfile.cuda) is
    converted from its Docker image instead (make sif FLAVOR=cuda)."""
    assert [p.name for p in DEFS] == sorted(t[2].name for t in recipes.targets())
    assert [p.name for p in DEFS] == ["hvdbench-classic-cpu.def", "hvdbench-classic-cuda.def",
                                      "hvdbench-current-cpu.def"]


@pytest.mark.parametrize("path", DEFS, ids=lambda p: p.name)
def test_definition_is_complete_and_clean(path):
    text = path.read_text()
    stack, flavor = re.match(r"hvdbench-(\w+)-(\w+)\.def", path.name).groups()
    values = recipes.images.build_args(stack, flavor)
    assert f"From: {values['BASE_IMAGE']}" in text
    for section in recipes.SECTIONS:
        assert re.search(rf"^{section}\b", text, re.M), section
    assert "%post -c /bin/bash\nset -euo pipefail\n" in text
    assert "--mount=" not in text and "SHELL [" not in text  # BuildKit-only syntax handled, not copied
    labels = text.split("%labels\n", 1)[1].split("\n%", 1)[0]
    assert "${" not in labels and f'\nio.hvdbench.torch {values["TORCH_VERSION"]}\n' in labels
    assert '"' not in labels and not re.search(r"^[\w.-]+=", labels, re.M)  # "key value", not key="value"
    runscript = text.split("%runscript\n", 1)[1].split("\n%", 1)[0]
    assert runscript.strip() == 'exec /opt/hvdbench/docker/entrypoint.sh "$@"'
    assert "export TF_USE_LEGACY_KERAS=1" in text.split("%post", 1)[1].split("%environment", 1)[0]
    assert "horovodrun --check-build" in text.split("%test\n", 1)[1]
    files = text.split("%files\n", 1)[1].split("\n%", 1)[0].splitlines()
    for line in files:
        assert (ROOT / line.split()[0]).exists(), line
    assert not any("ca-certificates" in line for line in files)  # the CA bundle is bound, never copied
    assert "rm -rf /wheelhouse" in text


def test_preprocess_strips_buildkit_syntax():
    text = ("ARG X=1\nFROM ${BASE_IMAGE}\nARG X=1\nSHELL [\"/bin/bash\"]\n"
            "RUN --mount=type=secret,id=ca \\\n    --mount=type=cache,target=/c \\\n    echo hi\n")
    out = recipes.preprocess(text, {"X": "2", "BASE_IMAGE": "debian:bookworm-slim"})
    assert out == "ARG X=2\nFROM debian:bookworm-slim\nARG X=2\nRUN echo hi\n"


def test_the_frameworks_key_leaves_this_package_out(tmp_path, monkeypatch):
    """sif.py --cache frameworks: a change to bench/ keeps the key, a change to any other input changes it;
    the default key changes with either."""
    from tools import sif

    (tmp_path / "bench").mkdir()
    (tmp_path / "docker").mkdir()
    (tmp_path / "bench" / "cli.py").write_text("one")
    (tmp_path / "docker" / "build.sh").write_text("one")
    text = "%files\nbench /opt/hvdbench/src/bench\ndocker/build.sh /opt/build.sh\n%post\ntrue\n"
    monkeypatch.setattr(sif, "ROOT", tmp_path)

    def key(skip=()):
        h = hashlib.sha256()
        sif._files_digest(text, h, skip)
        return h.hexdigest()

    every, heavy = key(), key(sif.PACKAGE_SOURCES)
    (tmp_path / "bench" / "cli.py").write_text("two")
    assert key() != every and key(sif.PACKAGE_SOURCES) == heavy
    (tmp_path / "docker" / "build.sh").write_text("two")
    assert key(sif.PACKAGE_SOURCES) != heavy


def test_a_sif_is_skipped_only_while_its_key_holds(tmp_path, monkeypatch):
    """The image SIF's key: the whole image's ID by default, the frameworks stage's with --cache frameworks."""
    from tools import sif

    ids = {"hvdbench:current-cpu": "sha256:image-1", "hvdbench:current-cpu-frameworks": "sha256:heavy-1"}
    monkeypatch.setattr(sif, "image_id", lambda image: ids[image])
    built = []

    def build(target, out, key, *rest, **kw):  # what sif._build leaves: the SIF and its key beside it
        built.append(key)
        out.write_text("sif")
        out.with_name(out.name + ".key").write_text(key + "\n")
        return out

    monkeypatch.setattr(sif, "runtime", lambda: "apptainer")
    monkeypatch.setattr(sif, "_docker_save", lambda image, folder: folder / "image.tar")
    monkeypatch.setattr(sif, "_build", build)
    out = tmp_path / "x.sif"
    for cache in ("inputs", "frameworks"):
        built.clear()
        sif.from_image("current", "cpu", out, cache=cache)
        sif.from_image("current", "cpu", out, cache=cache)
        assert len(built) == 1  # the second is up to date
        ids["hvdbench:current-cpu"] = "sha256:image-2"  # bench changed: a new image, same frameworks stage
        sif.from_image("current", "cpu", out, cache=cache)
        assert len(built) == (2 if cache == "inputs" else 1)


def test_zstd_squashes_through_apptainers_option_and_keys_the_sif_apart(tmp_path, monkeypatch):
    """--compression zstd passes mksquashfs's arguments and adds to the key (a gzip SIF is not up to date for it);
    gzip, the default, adds neither, so a SIF built before the option keeps its key."""
    from tools import sif

    monkeypatch.setattr(sif, "image_id", lambda image: "sha256:image-1")
    monkeypatch.setattr(sif, "runtime", lambda: "apptainer")
    monkeypatch.setattr(sif, "_docker_save", lambda image, folder: folder / "image.tar")
    built = []

    def build(target, out, key, options, *rest, **kw):
        built.append((key, options))
        out.write_text("sif")
        out.with_name(out.name + ".key").write_text(key + "\n")
        return out

    monkeypatch.setattr(sif, "_build", build)
    out = tmp_path / "x.sif"
    sif.from_image("current", "cpu", out)
    assert built[-1] == ("image hvdbench:current-cpu sha256:image-1", [])
    sif.from_image("current", "cpu", out, compression="zstd")
    assert built[-1] == ("image hvdbench:current-cpu sha256:image-1 squashfs zstd",
                         ["--mksquashfs-args", "-comp zstd -Xcompression-level 3"])
    sif.from_image("current", "cpu", out, compression="zstd")
    assert len(built) == 2  # up to date
    with pytest.raises(sif.SifError, match="unknown compression 'xz'"):
        sif.from_image("current", "cpu", out, compression="xz")


def test_an_image_sif_drops_the_archive_once_apptainer_has_copied_its_layers(tmp_path, monkeypatch):
    """`docker save`, then `apptainer build ... docker-archive://` with no layer cache; the archive is deleted at
    Apptainer's "Extracting OCI image" line, before the root filesystem, the squashfs and the SIF take their space
    (the CUDA image's build, holding them all, ran out of 39 GB). Apptainer's lines reach standard error. A failed
    build leaves the SIF there before as it was, no temporary file, and one line."""
    from tools import sif

    monkeypatch.setattr(sif, "image_id", lambda image: "sha256:image-1")
    monkeypatch.setattr(sif, "runtime", lambda: "apptainer")
    monkeypatch.setattr(sif.images, "docker_cli", lambda: "docker")
    seen, fail = [], []

    def run(cmd, check=False):
        assert cmd[:2] == ["docker", "save"]
        Path(cmd[cmd.index("-o") + 1]).write_bytes(b"layers")
        return subprocess.CompletedProcess(cmd, 0)

    class Apptainer:  # what subprocess.Popen starts: apptainer build, its INFO lines on standard error
        def __init__(self, cmd, cwd=None, env=None, stderr=None, text=None, errors=None):
            self.archive = Path(cmd[-1].removeprefix("docker-archive://"))
            assert cmd[:3] == ["apptainer", "build", "--force"] and env["APPTAINER_DISABLE_CACHE"] == "true"
            self.out, self.returncode = Path(cmd[-2]), 1 if fail else 0
            self.stderr = self.lines()

        def lines(self):
            yield "INFO:    Fetching OCI image...\n"
            seen.append(("fetching", self.archive.exists()))
            yield "INFO:    Extracting OCI image...\n"
            seen.append(("extracting", self.archive.exists()))
            yield "INFO:    Creating SIF file...\n"
            if not fail:
                self.out.write_text("sif")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def kill(self):
            pass

    monkeypatch.setattr(sif.subprocess, "run", run)
    monkeypatch.setattr(sif.subprocess, "Popen", Apptainer)
    out = tmp_path / "x.sif"
    sif.from_image("current", "cpu", out)
    assert seen == [("fetching", True), ("extracting", False)]  # gone once the layers were copied
    assert out.read_text() == "sif" and sorted(p.name for p in tmp_path.iterdir()) == ["x.sif", "x.sif.key"]
    out.write_text("the SIF built before")
    fail.append(True)
    with pytest.raises(sif.SifError, match=r"^apptainer build of x.sif failed \(exit 1\)$"):
        sif.from_image("current", "cpu", out, force=True)
    assert out.read_text() == "the SIF built before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.sif", "x.sif.key"]


def test_sif_check_judges_each_framework_environment():
    """tools/sif_check.py's reading of `bench env --check --json` from a SIF: a CUDA SIF passes with one NCCL and one
    CUDA runtime per framework from its own environment and Horovod with NCCL, MPI and Gloo; each fault is named."""
    import copy

    from tools.sif_check import env_problems

    def part(prefix):
        return {"prefix": prefix, "horovod": {"nccl_built": True, "mpi_built": True, "gloo_built": True},
                "loaded_libraries": {"nccl": [f"{prefix}/lib/libnccl.so.2"], "cudart": [f"{prefix}/lib/libcudart.so"]}}

    good = {"environments": {"torch": part("/opt/hvdbench/torch"), "tensorflow": part("/opt/hvdbench/tf")},
            "torch": {"cuda": "13.0"}, "tensorflow": {"cuda": "12.5.1"}}
    assert env_problems(good, "cuda") == []
    bad = copy.deepcopy(good)
    bad["environments"]["torch"]["horovod"]["nccl_built"] = False
    bad["environments"]["tensorflow"]["loaded_libraries"]["nccl"].append("/usr/lib/libnccl.so.2")
    bad["tensorflow"]["cuda"] = None
    assert env_problems(bad, "cuda") == [
        "tensorflow: not a CUDA build",
        "tensorflow: loads nccl from ['/opt/hvdbench/tf/lib/libnccl.so.2', '/usr/lib/libnccl.so.2'], not once from "
        "/opt/hvdbench/tf",
        "torch: Horovod without nccl"]
    assert env_problems(bad, "cpu") == []  # a CPU SIF needs no NCCL
    del bad["environments"]["torch"]
    assert env_problems(bad, "cpu") == ["framework environments ['tensorflow'], not torch and tensorflow"]
