"""`make sif-pull` for real (`make test-sif-pull`): the CPU image published to the registry here, pulled back by
digest into a SIF, and a run in it that names the digest.

Its own tier, keyed by the pull path's files (tools/tier_cache.py): the pull converts the whole image (about
3 minutes on 2 cores), and what the SIF holds is the image the apptainer tier runs on every change to bench/.
"""

import json

import pytest

from tests.conftest import SMALL, assert_valid_run, only_result, tool
from tests.system.test_apptainer import ROOT, SIF_DIR, sh
from tests.system.test_apptainer import host_env as host_env  # noqa: F401 (the fixture, shared)
from tools import images

pytestmark = [pytest.mark.apptainer, pytest.mark.sif_pull, pytest.mark.timeout(2400)]


def test_sif_pull_takes_the_published_image_by_digest_and_results_name_it(host_env, tmp_path):
    """`make sif-pull` against the registry here (tools/registry-up.sh): the CPU image pushed by tools/publish.py,
    pulled by digest into a SIF (skipped while the digest is the one the SIF holds), and a 2-rank run in it
    records that digest."""
    up = sh([str(ROOT / "tools" / "registry-up.sh")], timeout=600)
    assert up.returncode == 0, up.stderr
    registry = f"{up.stdout.strip()}/sif"
    record = tmp_path / "pushed.json"
    r = sh([*tool("publish"), "--registry", registry, "--image",
            "hvdbench:current-cpu", "--stack", "current", "--flavor", "cpu", "--json", str(record)],
           env=host_env, cwd=ROOT, timeout=1200)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    digest = json.loads(record.read_text())[0]["pushed"][0]["digest"]
    out = SIF_DIR / "hvdbench-current-cpu-pulled.sif"
    # Apptainer's own cache would keep every digest ever pulled (a GiB each): not kept between runs here.
    # zstd, as the apptainer tier's SIFs (about 3 minutes less than gzip here)
    r = sh(["make", "--no-print-directory", "sif-pull", f"REGISTRY={registry}", "STACK=current", "FLAVOR=cpu",
            f"SIF={out}", "SIF_COMPRESSION=zstd"], env=dict(host_env, APPTAINER_DISABLE_CACHE="true"), cwd=ROOT,
           timeout=1800)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    print(r.stdout.strip().splitlines()[-1])
    assert f"{registry}/hvdbench@{digest}" in r.stdout
    # with the checkout's bench/ bound over the SIF's, as in the apptainer tier: the image pushed may be one the
    # gate kept from an earlier bench/ (tools/images.py, --cache frameworks), and the run must test this one's
    binds = ",".join(f"{ROOT / 'bench'}:{path}:ro" for path in images.package_dirs("hvdbench:current-cpu"))
    r = sh(["apptainer", "exec", str(out), "bench", "torch-ddp", *SMALL, "--np", "2", "--output",
            str(tmp_path / "results")], env=dict(host_env, APPTAINER_BIND=binds), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    result = only_result(tmp_path / "results")
    assert_valid_run(result, "torch-ddp", 2, "self")
    assert result["environment"]["image"]["digest"] == digest, result["environment"]["image"]
    assert result["environment"]["image"]["reference"] == f"{registry}/hvdbench@{digest}"
