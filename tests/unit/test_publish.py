"""Publishing the images (tools/publish.py, make publish): the plan, the release workflow, the refusals, and the
CPU image's round trip through a registry running here (tools/registry-up.sh: Debian's docker-registry)."""

import json
import re

import pytest
import yaml

from tests.conftest import ROOT
from tools import images, publish

WORKFLOW = ROOT / ".github" / "workflows" / "images.yml"


@pytest.fixture
def stamped(monkeypatch):
    """A revision and source given (no git process: the unit tier starts none)."""
    monkeypatch.setenv("HVDBENCH_REVISION", "0123abc")
    monkeypatch.setenv("HVDBENCH_SOURCE", "https://example.org/hvdbench")
    monkeypatch.delenv("GITHUB_REF", raising=False)


@pytest.mark.parametrize("good", ["ghcr.io/owner", "127.0.0.1:5000", "localhost:5000/team/x", "registry.example.com",
                                  "reg.example.com:443/a_b/c-d/"])
def test_registry_references_that_are_taken(good):
    assert publish.check_registry(good) == good.rstrip("/")


@pytest.mark.parametrize("bad", ["owner", "ghcr.io/Owner", "bad_host.io/x", "ghcr.io//x", "127.0.0.1:5000/a b",
                                 "-ghcr.io/x", "ghcr.io/x/-y", ""])
def test_malformed_registry_is_one_line(bad):
    with pytest.raises(images.ImageError) as info:
        publish.check_registry(bad)
    assert "\n" not in str(info.value) and "is not a registry reference" in str(info.value)


def test_each_flavour_gets_its_tags_and_only_current_cuda_is_latest(stamped):
    from bench import __version__

    for stack in images.stacks():
        for flavor in images.FLAVORS:
            refs = publish.remote_tags("ghcr.io/o", stack, flavor)
            expected = [f"ghcr.io/o/hvdbench:{stack}-{flavor}-{__version__}", f"ghcr.io/o/hvdbench:{stack}-{flavor}"]
            if (stack, flavor) == ("current", "cuda"):
                expected.append("ghcr.io/o/hvdbench:latest")
            assert refs == expected


def test_the_plan_is_the_build_recipe_of_the_stack_file(stamped):
    """What publishing builds is what the stack file names: DOCKERFILE_<FLAVOR>, the flavour's args, the stamp."""
    for stack in images.stacks():
        values = images.read_stack(stack)
        for flavor in images.FLAVORS:
            p = publish.plan("ghcr.io/o", stack, flavor)
            dockerfile = values.get(f"DOCKERFILE_{flavor.upper()}", values.get("DOCKERFILE", "Dockerfile"))
            assert p["dockerfile"] == f"docker/{dockerfile}"
            assert p["build_args"]["HVDBENCH_REVISION"] == "0123abc"
            assert p["build_args"]["BASE_IMAGE"] == values[f"BASE_IMAGE_{flavor.upper()}"]
            assert p["labels"]["org.opencontainers.image.revision"] == "0123abc"
            assert p["image"] == images.tags(stack, flavor)[0]
    assert publish.plan("ghcr.io/o", "current", "cuda")["dockerfile"] == "docker/Dockerfile.cuda"


def test_cuda_dry_run_shows_dockerfile_args_and_tags(stamped, capsys):
    plans = publish.publish("ghcr.io/o", ["current"], ["cuda"], dry_run=True)
    shown = json.loads(capsys.readouterr().out)
    assert shown == plans[0]
    assert shown["dockerfile"] == "docker/Dockerfile.cuda"
    assert shown["build_args"]["TF_PACKAGE"] == "tensorflow[and-cuda]"
    assert shown["push"][-1] == "ghcr.io/o/hvdbench:latest"


def test_a_release_tag_must_be_the_package_version(stamped, monkeypatch):
    from bench import __version__

    monkeypatch.setenv("GITHUB_REF", f"refs/tags/v{__version__}")
    publish.check_release_tag()
    monkeypatch.setenv("GITHUB_REF", "refs/tags/v99.0")
    with pytest.raises(images.ImageError, match=f"v99.0 is not v{re.escape(__version__)}"):
        publish.check_release_tag()


def test_the_workflow_builds_and_pushes_only_through_make():
    """The release workflow restates nothing images.py decides: no Dockerfile, build args, tags or pushes of its
    own; its matrix is every stack x flavour; it runs `make image` on changes and `make publish` on a tag."""
    wf = yaml.safe_load(WORKFLOW.read_text())
    job = wf["jobs"]["build"]
    matrix = job["strategy"]["matrix"]
    assert sorted(matrix["stack"]) == images.stacks() and sorted(matrix["flavor"]) == list(images.FLAVORS)
    uses = [s["uses"].split("@")[0] for s in job["steps"] if "uses" in s]
    assert set(uses) <= {"actions/checkout", "actions/setup-python", "docker/login-action"}, uses
    runs = [s["run"] for s in job["steps"] if "run" in s]
    forbidden_words = ("docker build", "docker push", "docker tag", "buildx", "Dockerfile", "build-arg", "tools.images",
                       "tools.publish")
    for forbidden in forbidden_words:
        assert not any(forbidden in r for r in runs), forbidden
    matrix_args = "STACK=${{ matrix.stack }} FLAVOR=${{ matrix.flavor }}"
    tag = "startsWith(github.ref, 'refs/tags/v')"
    when = {s["run"]: s.get("if") for s in job["steps"] if "run" in s}
    assert when[f"make publish REGISTRY=ghcr.io/${{{{ github.repository_owner }}}} {matrix_args}"] == tag
    assert when[f"make image {matrix_args}"] == f"!{tag}"
    # and those make targets are the publish and build commands, with the same variables
    makefile = (ROOT / "Makefile").read_text()
    assert "-m tools.publish --registry $(REGISTRY) --stack $(STACK) --flavor $(FLAVOR)" in makefile
    assert "-m tools.images build --stack $(STACK) --flavor $(FLAVOR)" in makefile


def test_results_name_the_digest_where_the_runtime_tells(monkeypatch, tmp_path):
    from bench.records import env

    monkeypatch.setenv("HVDBENCH_IMAGE_STACK", "current")
    monkeypatch.setenv("HVDBENCH_IMAGE_REVISION", "0123abc")
    monkeypatch.delenv("HVDBENCH_IMAGE_DIGEST", raising=False)
    monkeypatch.setattr(env, "SIF_LABELS", str(tmp_path / "labels.json"))
    assert env.image() == {"stack": "current", "revision": "0123abc"}  # docker run: no digest unless given
    digest = "sha256:" + "a" * 64
    monkeypatch.setenv("HVDBENCH_IMAGE_DIGEST", f"127.0.0.1:5000/hvdbench@{digest}")  # docker inspect's RepoDigests
    assert env.image()["digest"] == digest and env.image()["reference"] == f"127.0.0.1:5000/hvdbench@{digest}"
    monkeypatch.setenv("HVDBENCH_IMAGE_DIGEST", digest)
    assert env.image()["digest"] == digest and "reference" not in env.image()
    monkeypatch.delenv("HVDBENCH_IMAGE_DIGEST")
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({env.SIF_SOURCE_LABEL: "hvdbench-current-cpu.tar"}))  # built, not pulled
    assert "digest" not in env.image()
    labels.write_text(json.dumps({env.SIF_SOURCE_LABEL: f"ghcr.io/o/hvdbench@{digest}"}))  # make sif-pull
    assert env.image()["digest"] == digest


def test_sif_pull_from_a_registry_that_does_not_answer_is_one_line():
    from tools import sif

    with pytest.raises(sif.SifError) as info:
        sif.resolve_digest("127.0.0.1:1/hvdbench:current-cpu")
    assert str(info.value).startswith("registry 127.0.0.1:1 does not answer (https: ") and "\n" not in str(info.value)
    with pytest.raises(images.ImageError, match="is not a registry reference"):
        sif.pull("Bad_Host/x", "current", "cpu")
