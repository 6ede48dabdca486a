#!/usr/bin/env python3
"""The system tier reruns only when its own inputs change.

    python -m tools.tier_cache fresh TIER     # exit 0 (and say so) when TIER passed on exactly these inputs
    python -m tools.tier_cache record TIER    # after TIER passed: remember its inputs' key
    python -m tools.tier_cache key TIER       # print the key and what it is made of
    python -m tools.tier_cache stale TIER...  # exit 0 (and name them) when any of these tiers would run

A system tier's key is the SHA-256 of its inputs: the content of every tracked file under the paths in
INPUTS (the code that ends up in the images and SIFs, the scripts that set the services up, the tier's own
tests and the shared test helpers), and the versions of the tools on this machine that run them (Docker,
Apptainer, Slurm). A pass is recorded in $HVDBENCH_TIER_CACHE (default /var/cache/hvdbench/tier-passes), one
file per tier; a tier whose key has a recorded pass is skipped with one line that says when it passed.
HVDBENCH_RERUN=1, or any PYTEST_ARGS, always runs it (and a run with PYTEST_ARGS records nothing).
A change to bench/ changes every system tier's key but sif_pull's: the images hold bench, so those tiers run again.
The sif_pull tier (a SIF pulled from a registry) is keyed by the pull path alone (OWN_ONLY: no COMMON): the SIF it
pulls holds the same image as the apptainer tier's image SIF, which runs again on every change to bench/. The
diagnose tier is keyed by bench diagnose's own code and what it composes, alike: the runs it starts are tested by
the multiproc and cluster tiers on every change.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("HVDBENCH_TIER_CACHE", "/var/cache/hvdbench/tier-passes"))
# What every system tier runs: the package, how it is installed, the shared test helpers and the make targets.
# The tools every tier's set-up and runner use (tools/*.sh, the pass cache itself) are part of COMMON.
SETUP = ["tools/__init__.py", "tools/setup.sh", "tools/run-tests.sh", "tools/docker-up.sh", "tools/registry-up.sh",
         "tools/slurm-up.sh", "tools/apptainer-up.sh", "tools/apt-install.sh", "tools/tier_cache.py"]
COMMON = ["bench", "pyproject.toml", "README.md", "Makefile", "requirements", *SETUP, "tests/conftest.py",
          "tests/fixtures", "tests/plugins", "tools/benchmarks/endings.py"]
# The images: what docker/ holds, and the tools that build and publish them.
DOCKER = ["docker", "tools/images.py", "tools/publish.py"]
INPUTS = {
    "slurm": ["tests/system/test_slurm.py", "singularity/slurm"],
    "image": [*DOCKER, "compose.yaml", "tests/system/test_images.py", "tests/system/test_publish.py",
              "tests/multiproc/test_publish.py"],
    "cluster": [*DOCKER, "tools/cluster.py", "singularity/slurm", "tests/system/test_cluster.py",
                "tools/benchmarks/shaped_links.py", "tools/benchmarks/cluster_modes.py"],
    "image_cuda": [*DOCKER, "tests/system/test_image_cuda.py"],
    "kubernetes": [*DOCKER, "k8s", "tools/k8s_check.py", "tests/system/test_kubernetes_pods.py"],
    "apptainer": [*DOCKER, "tools/cluster.py", "singularity", "tools/sif.py", "tools/recipes.py",
                  "tests/system/test_apptainer.py"],
    # publish, pull by digest, read the digest back in a run: the code on that path, and the tests' set-up
    "sif_pull": [*DOCKER, "tools/__init__.py", "tools/sif.py", "bench/records/env.py", "Makefile", "pyproject.toml",
                 "tools/registry-up.sh", "tools/apptainer-up.sh", "tools/slurm-up.sh", "tools/apt-install.sh",
                 "tests/conftest.py",
                 "tests/system/test_apptainer.py", "tests/system/test_sif_pull.py"],
    # bench diagnose on the 4-node cluster: its own code, what it composes (the allreduce, the attribution, the
    # record's schema) and the cluster; the runs it starts are the other tiers' to test
    "diagnose": ["bench/commands/diagnose", "bench/commands/allreduce", "bench/measure/attribution.py",
                 "bench/records/schema.py", "bench/data", "tools/__init__.py", "tools/cluster.py", "tools/images.py",
                 "docker/cluster", "Makefile", "pyproject.toml", "tests/conftest.py",
                 "tests/system/test_diagnose_cluster.py"],
}
# Tiers keyed by their INPUTS alone, without COMMON.
OWN_ONLY = {"sif_pull", "diagnose"}
TOOLS = {
    "slurm": [["srun", "--version"]],
    "image": [["docker", "version", "--format", "{{.Server.Version}}"]],
    "cluster": [["docker", "version", "--format", "{{.Server.Version}}"], ["docker-compose", "version", "--short"]],
    "image_cuda": [["docker", "version", "--format", "{{.Server.Version}}"]],
    "kubernetes": [["docker", "version", "--format", "{{.Server.Version}}"]],
    "apptainer": [["docker", "version", "--format", "{{.Server.Version}}"], ["srun", "--version"]],
    "sif_pull": [["docker", "version", "--format", "{{.Server.Version}}"]],
    "diagnose": [["docker", "version", "--format", "{{.Server.Version}}"], ["docker-compose", "version", "--short"]],
}


def tracked(paths: list[str]) -> list[str]:
    done = subprocess.run(["git", "ls-files", "-z", "--", *paths], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"tier-cache: not a git checkout ({done.stderr.strip()})")
    return sorted(name for name in done.stdout.split("\0") if name)


def tool_versions(tier: str) -> list[str]:
    found = []
    for cmd in TOOLS[tier]:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            out = "absent"
        found.append(f"{' '.join(cmd)}: {out}")
    apptainer = Path(os.environ.get("HVDBENCH_APPTAINER_DIR", "/var/cache/hvdbench/apptainer")) / "bin/apptainer"
    if tier in ("apptainer", "sif_pull") and apptainer.exists():
        found.append("apptainer: " + subprocess.run([str(apptainer), "--version"], capture_output=True,
                                                    text=True).stdout.strip())
    return found


def key(tier: str) -> tuple[str, list[str]]:
    if tier not in INPUTS:
        raise SystemExit(f"tier-cache: unknown tier '{tier}' (choose from: {', '.join(INPUTS)})")
    h = hashlib.sha256()
    paths = INPUTS[tier] if tier in OWN_ONLY else COMMON + INPUTS[tier]
    files = tracked(paths)
    for name in files:
        path = ROOT / name
        h.update(name.encode() + b"\0")
        h.update(path.read_bytes() if path.is_file() else b"(absent)")
    tools = tool_versions(tier)
    for line in tools:
        h.update(line.encode() + b"\0")
    return h.hexdigest(), [f"{len(files)} files under {', '.join(paths)}", *tools]


def passed(tier: str, digest: str) -> str | None:
    """When ``tier`` passed on inputs of key ``digest`` (None: no such pass recorded, or a rerun was asked for)."""
    if os.environ.get("HVDBENCH_RERUN") == "1" or os.environ.get("PYTEST_ARGS", "").strip():
        return None
    try:
        recorded, _, when = (CACHE / tier).read_text().partition(" ")
    except OSError:
        return None
    return when.strip() if recorded == digest else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=("fresh", "record", "key", "stale"))
    p.add_argument("tier", nargs="+", help="one tier (stale: one or more)")
    a = p.parse_args()
    if a.command == "stale":  # no side effect: what `make test-system-prepare` asks before building for them
        stale = [tier for tier in a.tier if passed(tier, key(tier)[0]) is None]
        print(f"tier-cache: stale: {' '.join(stale) or 'none'}")
        sys.exit(0 if stale else 1)
    if len(a.tier) != 1:
        p.error(f"{a.command} takes one tier")
    tier = a.tier[0]
    digest, parts = key(tier)
    if a.command == "key":
        print(digest)
        print("\n".join(parts))
    elif a.command == "fresh":
        when = passed(tier, digest)
        if when is None:
            sys.exit(1)
        print(f"{tier}: passed at {when} on these same inputs (key {digest[:12]}); not run again "
              f"(HVDBENCH_RERUN=1 runs it)")
        times = Path(os.environ.get("HVDBENCH_TEST_TIMES", "results/test-times"))
        times.mkdir(parents=True, exist_ok=True)
        (times / f"{tier}.wall").write_text("0 0 cached\n")
    else:
        if os.environ.get("PYTEST_ARGS", "").strip():
            return  # a partial run proves nothing about the tier
        CACHE.mkdir(parents=True, exist_ok=True)
        (CACHE / tier).write_text(f"{digest} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")


if __name__ == "__main__":
    main()
