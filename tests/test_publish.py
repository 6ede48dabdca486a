"""Publishing the images (docker/publish.py, make publish): the plan, the release workflow, the refusals, and the
CPU image's round trip through a registry running here (scripts/registry-up.sh: Debian's docker-registry)."""

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import SMALL, assert_valid_run, only_result, run_container

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docker"))
import images  # noqa: E402
import publish  # noqa: E402

REGISTRY = "127.0.0.1:5000"
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
    for forbidden in ("docker build", "docker push", "docker tag", "buildx", "Dockerfile", "build-arg", "images.py"):
        assert not any(forbidden in r for r in runs), forbidden
    matrix_args = "STACK=${{ matrix.stack }} FLAVOR=${{ matrix.flavor }}"
    tag = "startsWith(github.ref, 'refs/tags/v')"
    when = {s["run"]: s.get("if") for s in job["steps"] if "run" in s}
    assert when[f"make publish REGISTRY=ghcr.io/${{{{ github.repository_owner }}}} {matrix_args}"] == tag
    assert when[f"make image {matrix_args}"] == f"!{tag}"
    # and those make targets are the publish and build commands, with the same variables
    makefile = (ROOT / "Makefile").read_text()
    assert "docker/publish.py --registry $(REGISTRY) --stack $(STACK) --flavor $(FLAVOR)" in makefile
    assert "docker/images.py build --stack $(STACK) --flavor $(FLAVOR)" in makefile


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


# -- with processes: the command line ------------------------------------------------------------------------------
def publish_cli(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "docker" / "publish.py"), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


@pytest.mark.multiproc
def test_make_publish_dry_run_lists_every_flavour():
    r = subprocess.run(["make", "--no-print-directory", "publish", "REGISTRY=ghcr.io/o", "STACK=all", "FLAVOR=all",
                        "DRY_RUN=1"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    shown = [json.loads(part) for part in re.split(r"(?m)^(?=\{)", r.stdout) if part.strip().startswith("{")]
    assert {(p["stack"], p["flavor"]) for p in shown} == {(s, f) for s in images.stacks() for f in images.FLAVORS}
    assert all(p["push"] and p["dockerfile"].startswith("docker/Dockerfile") for p in shown)


@pytest.mark.multiproc
@pytest.mark.parametrize("args, says", [
    (["--registry", "Bad_Host/x"], "is not a registry reference"),
    (["--registry", "ghcr.io/o", "--stack", "nope"], "unknown stack nope"),
    (["--registry", "ghcr.io/o", "--flavor", "tpu"], "unknown flavor tpu"),
])
def test_bad_publish_arguments_are_one_line(args, says):
    r = publish_cli(*args, "--dry-run", timeout=120)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not r.stdout


# -- the system tier: a registry here, the CPU image -----------------------------------------------------------------
def registry_tags(repository: str) -> list[str]:
    try:
        with urllib.request.urlopen(f"http://{REGISTRY}/v2/{repository}/tags/list", timeout=10) as answer:
            return json.loads(answer.read()).get("tags") or []
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise


@pytest.fixture(scope="module")
def registry():
    r = subprocess.run([str(ROOT / "scripts" / "registry-up.sh")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == REGISTRY, r.stderr
    return REGISTRY


@pytest.fixture(scope="module")
def published(registry, tmp_path_factory):
    """The CPU image through the publish path, as `make publish STACK=current FLAVOR=cpu` runs it (`make
    test-image` built it through the same inputs, so every layer but the stamp is cached), pushed to the registry
    here: what publish.py wrote to --json."""
    record = tmp_path_factory.mktemp("publish") / "published.json"
    dk = images.client()
    local = images.tags("current", "cpu")[0]
    before = dk.images.get(local)
    r = publish_cli("--registry", registry, "--stack", "current", "--flavor", "cpu", "--json", str(record))
    try:
        assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
        print(r.stdout[-1500:])
        yield json.loads(record.read_text())[0]
    finally:
        # Publishing built the stamped image under the local name too; the tiers after this one expect the image
        # `make test-image` built (the SIFs and the cluster's nodes are keyed by its ID): give the name back.
        before.tag(*local.split(":"))


@pytest.mark.image
def test_publish_pull_back_and_run_names_the_image(published, tmp_path):
    import docker
    from bench import __version__

    dk = images.client()
    pushed = published["pushed"]
    assert [p["reference"] for p in pushed] == published["push"]
    digest = pushed[0]["digest"]
    assert {p["digest"] for p in pushed} == {digest} and re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    assert set(registry_tags("hvdbench")) >= {f"current-cpu-{__version__}", "current-cpu"}
    revision = published["build_args"]["HVDBENCH_REVISION"]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert revision.split("+")[0] == head
    # Remove the registry's names here, pull one back: the registry gives the digest the push printed.
    for ref in published["push"]:
        dk.images.remove(ref)
    with pytest.raises(docker.errors.ImageNotFound):
        dk.images.get(published["push"][0])
    pulled = dk.images.pull(published["push"][0])
    repo = published["push"][0].rsplit(":", 1)[0]
    assert f"{repo}@{digest}" in pulled.attrs["RepoDigests"]
    labels = pulled.labels
    assert labels["org.opencontainers.image.revision"] == revision
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["io.hvdbench.stack"] == "current" and labels["io.hvdbench.flavor"] == "cpu"
    # A run in the pulled image, given its digest as docker lists it: the result names the image.
    results = tmp_path / "results"
    results.mkdir()
    code, logs = run_container(dk, published["push"][0], ["torch-ddp", *SMALL, "--np", "2"], results,
                               environment={"HVDBENCH_IMAGE_DIGEST": f"{repo}@{digest}"})
    assert code == 0, logs[-3000:]
    result = only_result(results)
    assert_valid_run(result, "torch-ddp", 2, "self")
    assert result["environment"]["image"] == {"stack": "current", "flavor": "cpu", "version": __version__,
                                              "revision": revision, "digest": digest,
                                              "reference": f"{repo}@{digest}"}


@pytest.mark.image
def test_an_image_without_a_passed_self_test_is_never_pushed(registry):
    """The frameworks stage has no self-test marker: refused in one line, nothing reaches the registry."""
    r = publish_cli("--registry", f"{registry}/refused", "--image", images.frameworks_tag("current", "cpu"),
                    "--stack", "current", "--flavor", "cpu", timeout=300)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "has not passed its self-test" in r.stderr and "nothing pushed" in r.stderr
    assert registry_tags("refused/hvdbench") == []


@pytest.mark.image
def test_an_unreachable_registry_is_one_line_and_tags_nothing(registry):
    dk = images.client()
    r = publish_cli("--registry", "127.0.0.1:5999", "--image", "hvdbench:current-cpu", "--stack", "current",
                    "--flavor", "cpu", timeout=300)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "registry 127.0.0.1:5999 does not answer" in r.stderr and "nothing pushed" in r.stderr
    assert not [t for i in dk.images.list() for t in i.tags if t.startswith("127.0.0.1:5999/")]


def test_sif_pull_from_a_registry_that_does_not_answer_is_one_line():
    sys.path.insert(0, str(ROOT / "singularity"))
    import sif

    with pytest.raises(sif.SifError) as info:
        sif.resolve_digest("127.0.0.1:1/hvdbench:current-cpu")
    assert str(info.value).startswith("registry 127.0.0.1:1 does not answer (https: ") and "\n" not in str(info.value)
    with pytest.raises(images.ImageError, match="is not a registry reference"):
        sif.pull("Bad_Host/x", "current", "cpu")
