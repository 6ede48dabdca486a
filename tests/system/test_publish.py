"""Publishing the images (tools/publish.py, make publish): the plan, the release workflow, the refusals, and the
CPU image's round trip through a registry running here (tools/registry-up.sh: Debian's docker-registry)."""

import json
import re
import subprocess
import urllib.error
import urllib.request

import pytest

from tests.conftest import (
    BENCH_DIGEST,
    ROOT,
    SMALL,
    assert_valid_run,
    checkout_bench_digest,
    only_result,
    run_container,
)
from tests.multiproc.test_publish import publish_cli
from tools import images

REGISTRY = "127.0.0.1:5000"


# -- with processes: the command line ------------------------------------------------------------------------------
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
    r = subprocess.run([str(ROOT / "tools" / "registry-up.sh")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == REGISTRY, r.stderr
    return REGISTRY


@pytest.fixture(scope="module")
def published(registry, tmp_path_factory):
    """The CPU image through the publish path, as `make publish STACK=current FLAVOR=cpu` runs it (`make
    test-image` built it through the same inputs, so its frameworks stage is cached; its package layer and
    self-test run again where the gate kept an image built for an earlier bench/), pushed to the registry here:
    what publish.py wrote to --json."""
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
    # The image as users get it holds this checkout's bench, to the byte: the gate's other runs bind the checkout's
    # over an image that may have been built for an earlier one (tools/images.py, --cache frameworks).
    code, out = run_container(dk, published["push"][0], ["-I", "-c", BENCH_DIGEST], entrypoint="python3",
                              stdout_only=True, own_bench=True)
    assert code == 0 and out.strip() == checkout_bench_digest(), out[-2000:]
    # A run in the pulled image, with its own bench, given its digest as docker lists it: the result names the image.
    results = tmp_path / "results"
    results.mkdir()
    code, logs = run_container(dk, published["push"][0], ["torch-ddp", *SMALL, "--np", "2"], results,
                               environment={"HVDBENCH_IMAGE_DIGEST": f"{repo}@{digest}"}, own_bench=True)
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
