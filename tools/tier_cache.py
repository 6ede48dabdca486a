#!/usr/bin/env python3
"""The system tier reruns only when something it runs or reads changed.

    python -m tools.tier_cache fresh TIER     # exit 0 (and say so) when TIER passed on exactly these inputs
    python -m tools.tier_cache record TIER    # after TIER passed: remember its inputs' key
    python -m tools.tier_cache key TIER       # print the key and what it is made of
    python -m tools.tier_cache stale TIER...  # exit 0 (and name them) when any of these tiers would run
    python -m tools.tier_cache select TIER    # the -m clause to add: " and smoke" when only the smoke tests must run
    python -m tools.tier_cache blocked        # the tiers this machine cannot run (no root, no Docker), and why

A system tier's key is the SHA-256 of everything it executes or reads, in four parts:
- files: the content of every file git knows or would add (tracked, and untracked but not ignored) under the
  tier's paths: the package and how it is built and installed (COMMON: bench/, pyproject.toml, requirements/, the
  venv's Horovod build script and patches, the set-up scripts, the shared test helpers), the images' inputs
  (DOCKER: docker/, .dockerignore, the image tools; less the other flavour's Dockerfile, NOT_READ) where it
  starts images, its own tools, and every tests/system file that carries the tier's marker (a test marked
  `slurm` in any file is in slurm's key). The
  Makefile counts without its comments and `## help` texts: a help line reruns nothing. README.md and docs/
  are in no key: the images do not copy them.
- tools: the versions of what the tier calls on this machine (Docker and compose, Slurm, Open MPI, PMIx,
  Apptainer as the tier finds it) and the IDs of the base image and the frameworks stage its images are built on.
- venv: the name and version of every distribution in the venv the tier's tests and runs use (most requirements
  are floors, so a fresh venv follows the index), less this project's own editable install.

Two parts, two keys. Every tier but diagnose, sif_pull and bare_debian has smoke tests (pytest.mark.smoke: one or
two real runs in its environment, their results checked in full), keyed by all of the above (the "whole" key). Its
other tests, the features, are keyed by the same inputs with bench/ replaced by its surface (tools/surface.py: the
source of every code unit that the unit, framework and multiproc tiers do not run; those tiers prove the rest on every
run themselves). So a change to a function the lower tiers run reruns each tier's smoke tests only (`select` prints
the pytest -m clause that narrows a tier to them), and a change to one only the system tiers run reruns them all.
The diagnose tier has features only, keyed by the surface of the import closure of `bench diagnose` and of
`python -m bench`, which its phases run on the nodes (tools.imports: the modules they import at any depth, the
registries' lazy loads and every model included) and its own command's files; the
sif_pull tier by the pull path's files alone (OWN_ONLY): the SIF it pulls holds the image the apptainer tier runs;
bare_debian by the set-up's files and the base image (OWN_ONLY too): README's make bench from a bare Debian.

A pass is one line in $HVDBENCH_TIER_CACHE/TIER (the whole key) or TIER.features (default
/var/cache/hvdbench/tier-passes): the key, the key less its venv part, the time. A tier's pass records both. Every
passed key is kept (the newest MAX_PASSES), so going back to an earlier state skips again. `stale` asked before the
venv exists (make test starts the system set-up beside the venv's) judges by the key less its venv part.
HVDBENCH_RERUN=1, or any PYTEST_ARGS, always runs a tier (and a run with PYTEST_ARGS records nothing).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tools import surface

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("HVDBENCH_TIER_CACHE", "/var/cache/hvdbench/tier-passes"))
MAX_PASSES = 64
# What every system tier's set-up and runner use: the scripts, the runner, the pass cache itself.
SETUP = ["tools/__init__.py", "tools/setup.sh", "tools/run-tests.sh", "tools/docker-up.sh", "tools/registry-up.sh",
         "tools/slurm-up.sh", "tools/apptainer-up.sh", "tools/apt-install.sh", "tools/uv_install.py",
         "tools/tier_cache.py", "tools/surface.py"]
# The venv's Horovod (the slurm tier's srun jobs run it; the CPU image installs its wheel).
HOROVOD_BUILD = ["docker/build-horovod.sh", "docker/horovod"]
COMMON = ["bench", "pyproject.toml", "Makefile", "requirements", *SETUP, *HOROVOD_BUILD, "tests/conftest.py",
          "tests/system/__init__.py", "tests/fixtures", "tests/plugins", "tools/benchmarks/__init__.py",
          "tools/benchmarks/endings.py"]
# The images: what docker/ holds, what reaches the build context, and the tools that build and publish them.
DOCKER = ["docker", ".dockerignore", "tools/images.py", "tools/publish.py"]
INPUTS = {
    "slurm": ["singularity/slurm"],
    # the contract (tests/system/test_contract.py) imports the SIF's fixtures from test_apptainer.py
    "image": [*DOCKER, "compose.yaml", "tests/multiproc/test_publish.py", "tools/cluster.py",
              "tests/system/test_apptainer.py"],
    "cluster": [*DOCKER, "tools/cluster.py", "singularity/slurm", "tools/benchmarks/shaped_links.py",
                "tools/benchmarks/cluster_modes.py"],
    # the CUDA image and its SIF (the contract builds it with tools/sif.py, on test_apptainer.py's fixtures)
    "image_cuda": [*DOCKER, "tools/sif.py", "tests/system/test_apptainer.py"],
    "kubernetes": [*DOCKER, "k8s", "tools/k8s_check.py"],
    "apptainer": [*DOCKER, "tools/cluster.py", "singularity", "tools/sif.py", "tools/recipes.py"],
    # publish, pull by digest, read the digest back in a run: the code on that path, and the tests' set-up
    "sif_pull": [*DOCKER, "tools/__init__.py", "tools/sif.py", "bench/records/env.py", "Makefile", "pyproject.toml",
                 "tools/registry-up.sh", "tools/apptainer-up.sh", "tools/slurm-up.sh", "tools/apt-install.sh",
                 "tools/run-tests.sh", "tools/tier_cache.py", "tools/surface.py", "tests/conftest.py",
                 "tests/system/__init__.py", "tests/system/test_apptainer.py", "tools/benchmarks/__init__.py",
                 "tools/benchmarks/endings.py"],
    # bench diagnose on the 4-node cluster: COMMON with the import closure of its package in place of all of
    # bench/ (PACKAGE), the node image (DOCKER, docker/cluster) and the cluster tool
    "diagnose": [*DOCKER, "bench/commands/diagnose", "tools/cluster.py"],
    # the GPU check's short form on the CPU: its scripts, Horovod's reference benchmark it compares against, and
    # bench's command line whole (the options the check passes); the rest of bench/ by its surface (features only)
    "gpu_check": ["tools/gpu-check.sh", "tools/gpu_check_summary.py", "tools/gpu-check-prepare.sh",
                  "tools/benchmarks/reference.py", "tools/benchmarks/reference", "bench/cli.py", "bench/config.py"],
    # README's make bench in a bare Debian container: the set-up's files (how the venv is made, Horovod built,
    # the package installed) and the base image, not bench/ (the lower tiers run it from the same set-up each gate)
    "bare_debian": [*SETUP, *HOROVOD_BUILD, "Makefile", "pyproject.toml", "requirements", "tools/images.py",
                    "tests/conftest.py", "tests/system/__init__.py"],
}
# What a tier never reads under its INPUTS: each flavour's image tiers read docker/ less the other flavour's own
# files. The CUDA image is built from Dockerfile.cuda alone; the CPU image, its SIFs, the cluster's node image and
# the pods never read Dockerfile.cuda (so a change to the CUDA image reruns image_cuda alone, not every tier).
CPU_ONLY, CUDA_ONLY = ["docker/Dockerfile", "docker/cluster"], ["docker/Dockerfile.cuda"]
NOT_READ = {"image_cuda": CPU_ONLY,
            **{tier: CUDA_ONLY for tier in ("image", "cluster", "kubernetes", "apptainer", "sif_pull", "diagnose")}}
# Tiers keyed by their INPUTS alone, without COMMON.
OWN_ONLY = {"sif_pull", "bare_debian"}
# The pytest marker each tier selects its tests by (the Makefile's -m); a file carrying it is in the tier's key.
MARKERS = {tier: tier for tier in INPUTS}
# Tiers with smoke tests (one or two real runs per environment: host Slurm, the CPU image, pods, the cluster of
# containers, the CUDA image, Apptainer), selected by pytest.mark.smoke. Each other test of a tier is a feature.
SMOKE = {"slurm", "image", "kubernetes", "cluster", "image_cuda", "apptainer"}
SMOKE_MARKER = "smoke"
DOCKER_TIERS = {tier for tier, paths in INPUTS.items() if "docker" in paths} | {"bare_debian"}
# Docker tiers that run the base image alone (no frameworks stage under them).
BASE_ONLY = {"bare_debian"}
SLURM_TIERS = {"slurm", "cluster", "apptainer", "sif_pull", "diagnose"}
APPTAINER_TIERS = {"apptainer", "sif_pull", "image_cuda"}
BASE_IMAGE = "hvdbench-base:bookworm"
DOCKER_CMDS = [["docker", "version", "--format", "{{.Server.Version}}"], ["docker", "compose", "version", "--short"],
               ["docker-compose", "version", "--short"],
               ["docker", "image", "inspect", "--format", "{{.Id}}", BASE_IMAGE]]
# The frameworks stage each image tier's images are built on (the gate builds the stack "current"): a stage built
# again from the same files can hold other packages (most requirements are floors), so its image ID is in the key.
FRAMEWORKS_IMAGE = {"image_cuda": "hvdbench:current-cuda-frameworks"}
CPU_FRAMEWORKS_IMAGE = "hvdbench:current-cpu-frameworks"
# Slurm and the MPI its srun --mpi=pmix and the mpirun runs take (the cluster's nodes have their own, in the image).
SLURM_CMDS = [["srun", "--version"], ["mpirun", "--version"],
              ["dpkg-query", "-W", "-f", "${Package}=${Version} ", "libpmix2", "libpmix-bin", "openmpi-bin",
               "slurm-wlm-basic-plugins", "munge"]]


def listed(paths: list[str]) -> list[str]:
    """The files git knows, or would add, under ``paths`` (tracked, and untracked but not ignored)."""
    done = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths],
                          cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"tier-cache: not a git checkout ({done.stderr.strip()})")
    return sorted({name for name in done.stdout.split("\0") if name})


def marked(marker: str) -> list[str]:
    """The tests/system files that carry ``marker`` (pytest.mark.MARKER anywhere in them)."""
    pattern = re.compile(rf"pytest\.mark\.{re.escape(marker)}\b")
    return [name for name in listed(["tests/system"]) if name.endswith(".py")
            and pattern.search((ROOT / name).read_text(errors="replace"))]


def diagnose_modules() -> list[str]:
    """The files of every bench module that `bench diagnose` imports at any depth (tools.imports' graph: module
    level, in functions, and the modules the registries load by name), and of what its phases run on the nodes:
    `python -m bench` (bench/__main__.py and what it imports: the CLI, the modes and the allreduce) and every model
    (each framework's model module is imported by a name the registry builds, which the graph does not see)."""
    from tools import imports
    modules = imports.scan(ROOT / "bench")
    seen: set[str] = set()
    todo = [name for name in modules if name.startswith(("bench.commands.diagnose", "bench.models."))
            or name == "bench.__main__"]
    while todo:
        name = todo.pop()
        if name in seen or name not in modules:
            continue
        seen.add(name)
        mod = modules[name]
        parts = name.split(".")
        todo += [*mod.top, *(m for m, _ in mod.local), *mod.dynamic]
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # its packages' __init__ run first
    files = []
    for name in sorted(seen):
        path = Path(*name.split("."))
        files.append(str(path / "__init__.py") if (ROOT / path).is_dir() else f"{path}.py")
    return files


# Tiers keyed by part of bench/: a function that gives those files, in place of the whole package.
PACKAGE = {"diagnose": diagnose_modules}


def makefile_text(data: bytes) -> bytes:
    """The Makefile as make runs it: comment lines and the `## help` text of a target line left out."""
    lines = []
    for line in data.decode().splitlines():
        if line.lstrip().startswith("#"):
            continue
        if re.match(r"^[a-z][a-z0-9-]*:", line) and " ## " in line:
            line = line.split(" ## ", 1)[0]
        lines.append(line)
    return "\n".join(lines).encode()


def parts_of(tier: str) -> list[str]:
    """The parts of a tier with a key each: "whole" (every input, all of bench/: what its smoke tests are run on)
    where the tier has smoke tests, and "features" (bench/ as its surface)."""
    return ["whole", "features"] if tier in SMOKE else ["features"]


# tools/lower-covered.txt says which code units the lower tiers run as of the commit it names; a test taken out of
# them since, or a unit they stopped running, would leave a unit listed as run that is not. Past this many commits to
# bench/ or the lower tiers' tests since it was measured, the surface is not trusted: the features are keyed by all of
# bench/ (every change reruns every test of the tiers it reaches) until `make test-surface` measures it again. About
# a week of this project's commits; measuring costs about 30 minutes, a gate that reruns every feature about 30 more.
STALE_AFTER = 60
LOWER_TESTS = ["bench", "tests/unit", "tests/framework", "tests/multiproc"]


def measurement_age() -> tuple[int | None, str]:
    """(the commits to bench/ and the lower tiers' tests since tools/lower-covered.txt was measured, or None where
    git cannot tell; the commit it names)."""
    try:
        head = (ROOT / surface.COVERED.relative_to(surface.ROOT)).read_text().splitlines()[0]
    except (OSError, IndexError):
        return None, "?"
    found = re.search(r"measured at ([0-9a-f]{7,40})", head)
    if not found:
        return None, "?"
    done = subprocess.run(["git", "rev-list", "--count", f"{found.group(1)}..HEAD", "--", *LOWER_TESTS], cwd=ROOT,
                          capture_output=True, text=True)
    return (int(done.stdout) if done.returncode == 0 and done.stdout.strip().isdigit() else None), found.group(1)


def surface_stale() -> str | None:
    """Why the surface is not trusted (the measurement too old, or of a commit git cannot find), or None."""
    age, commit = measurement_age()
    if age is None:
        return f"tools/lower-covered.txt names no commit git finds here ({commit})"
    if age > STALE_AFTER:
        return (f"tools/lower-covered.txt was measured {age} commits to {', '.join(LOWER_TESTS)} ago (at {commit}; "
                f"more than {STALE_AFTER}): make test-surface measures it again")
    return None


def files_of(tier: str, part: str = "whole") -> tuple[list[str], list[str], list[str] | None]:
    """(the paths the key reads, the files under them hashed whole, the bench/ files whose surface is hashed in
    their place, or None). A stale measurement (surface_stale) hashes those bench/ files whole too."""
    paths = INPUTS[tier] if tier in OWN_ONLY else COMMON + INPUTS[tier]
    marks = set(marked(MARKERS[tier]))
    skip = NOT_READ.get(tier, [])

    def read(names: list[str]) -> set[str]:
        return {n for n in names if not any(n == p or n.startswith(p + "/") for p in skip)}
    if tier in OWN_ONLY:
        return paths, sorted(read(listed(paths)) | marks), None
    if part == "whole" and tier not in PACKAGE:
        return paths, sorted(read(listed(paths)) | marks), None
    paths = [path for path in paths if path != "bench"]
    whole = read(listed(paths)) | marks
    package = PACKAGE[tier]() if tier in PACKAGE else listed(["bench"])
    if part == "features" and surface_stale():
        return paths, sorted(whole | set(package)), None
    return paths, sorted(whole), sorted(set(package) - whole)


def run_quiet(cmd: list[str]) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "absent"
    # stdout alone: dpkg-query names the packages it knows and exits 1 for the others
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else "absent"


def apptainer_version() -> str:
    """The apptainer the tier runs: the Makefile puts `tools/apptainer-up.sh`'s folder first on PATH, which is a
    real installation on PATH, else the wrappers under the cache folder."""
    for name in ("apptainer", "singularity"):
        found = shutil.which(name)
        if found and "hvdbench-apptainer-wrapper" not in Path(found).read_text(errors="replace")[:4096]:
            return f"{found}: {run_quiet([found, '--version'])}"
    wrapper = Path(os.environ.get("HVDBENCH_APPTAINER_DIR", "/var/cache/hvdbench/apptainer")) / "bin/apptainer"
    return f"{wrapper}: {run_quiet([str(wrapper), '--version'])}" if wrapper.exists() else "apptainer: absent"


def tool_versions(tier: str) -> list[str]:
    frameworks = ["docker", "image", "inspect", "--format", "{{.Id}}", FRAMEWORKS_IMAGE.get(tier, CPU_FRAMEWORKS_IMAGE)]
    docker = [*DOCKER_CMDS] if tier in BASE_ONLY else [*DOCKER_CMDS, frameworks]
    cmds = (docker if tier in DOCKER_TIERS else []) + (SLURM_CMDS if tier in SLURM_TIERS else [])
    found = [f"{' '.join(cmd)}: {run_quiet(cmd)}" for cmd in cmds]
    if tier in APPTAINER_TIERS:
        found.append(apptainer_version())
    return found


def venv_packages() -> list[str] | None:
    """Every distribution in the venv (name==version, sorted), less this project's own; None before `make venv`
    has finished it (its stamp file)."""
    venv = Path(os.environ.get("VENV", ROOT / ".venv"))
    if not venv.is_absolute():
        venv = ROOT / venv
    sites = sorted(venv.glob("lib/python*/site-packages"))
    if not sites or not (venv / ".hvdbench-ready").exists():
        return None
    # the interpreter too: a patch release of Python changes no distribution's name
    cfg = venv / "pyvenv.cfg"
    lines = cfg.read_text().splitlines() if cfg.is_file() else []
    found = {f"python=={line.split('=', 1)[1].strip()}" for line in lines
             if line.split("=", 1)[0].strip() in ("version", "version_info")}
    found.add(f"lib/{sites[0].parent.name}")
    for info in sites[0].glob("*.dist-info"):
        name, _, version = info.name[:-len(".dist-info")].partition("-")
        if name.lower().replace("_", "-") != "hvdbench":
            found.add(f"{name.lower().replace('_', '-')}=={version}")
    return sorted(found)


def key(tier: str, part: str | None = None) -> tuple[str, list[str]]:
    """(the key of ``part`` of ``tier`` (default its first: the whole where it has smoke tests), what it is made
    of); key_parts gives the key less its venv part too."""
    full, _, made_of = key_parts(tier, part)
    return full, made_of


def key_parts(tier: str, part: str | None = None) -> tuple[str, str, list[str]]:
    if tier not in INPUTS:
        raise SystemExit(f"tier-cache: unknown tier '{tier}' (choose from: {', '.join(INPUTS)})")
    part = part or parts_of(tier)[0]
    h = hashlib.sha256()
    paths, files, package = files_of(tier, part)
    for name in files:
        path = ROOT / name
        data = path.read_bytes() if path.is_file() else b"(absent)"
        h.update(name.encode() + b"\0")
        h.update(makefile_text(data) if name == "Makefile" else data)
    made_of = [f"{part}: {len(files)} files under {', '.join(paths)}"]
    if part == "features" and package is None and tier not in OWN_ONLY and (why := surface_stale()):
        made_of.append(f"bench/ whole, not its surface: {why}")
    if package is not None:
        digest, names = surface.surface(ROOT, package)
        h.update(b"surface\0" + digest.encode())
        made_of.append(f"the surface of {len(package)} bench/ files: {len(names)} units no lower tier runs "
                       f"(tools/surface.py)")
    tools = tool_versions(tier)
    for line in tools:
        h.update(line.encode() + b"\0")
    without_venv = h.hexdigest()
    packages = venv_packages()
    h.update("\n".join(packages if packages is not None else ["(no venv)"]).encode())
    marks = ", ".join(marked(MARKERS[tier])) or "none"
    venv = f"{len(packages)} distributions in the venv" if packages is not None else "no venv yet"
    return h.hexdigest(), without_venv, [*made_of, f"tests marked {MARKERS[tier]}: {marks}", *tools, venv]


def store(tier: str, part: str) -> Path:
    return CACHE / (tier if part == "whole" else f"{tier}.{part}")


def passes(tier: str, part: str = "whole") -> list[tuple[str, str, str]]:
    """The recorded passes of ``part`` of ``tier``: (key, key less venv, when), oldest first."""
    try:
        lines = store(tier, part).read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split()
        if len(fields) == 3:
            found.append((fields[0], fields[1], fields[2]))
    return found


def passed(tier: str, digest: str, without_venv: str | None = None, part: str = "whole") -> str | None:
    """When ``part`` of ``tier`` passed on inputs of key ``digest`` (or, given ``without_venv``, on those inputs
    less the venv's); None: no such pass recorded, or a rerun was asked for."""
    if os.environ.get("HVDBENCH_RERUN") == "1" or os.environ.get("PYTEST_ARGS", "").strip():
        return None
    for full, partial, when in reversed(passes(tier, part)):
        if full == digest or (without_venv is not None and partial == without_venv):
            return when
    return None


def record(tier: str, digest: str, without_venv: str, part: str = "whole") -> None:
    kept = [p for p in passes(tier, part) if p[0] != digest][-(MAX_PASSES - 1):]
    kept.append((digest, without_venv, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = CACHE / f".{store(tier, part).name}.tmp"
    tmp.write_text("".join(" ".join(p) + "\n" for p in kept))
    tmp.replace(store(tier, part))


def stale_parts(tier: str, no_venv: bool = False) -> list[str]:
    """The parts of ``tier`` with no pass on their current inputs (judged less the venv's part when the venv is
    not there yet)."""
    found = []
    for part in parts_of(tier):
        full, without_venv, _ = key_parts(tier, part)
        if passed(tier, full, without_venv if no_venv else None, part) is None:
            found.append(part)
    return found


# The system tiers that need root here: its set-up installs packages (apt), starts Slurm (the munge key, slurmd as
# root), makes the base image (debootstrap) and sets Apptainer up once. Only the GPU check's short form runs
# from the venv alone.
NEEDS_ROOT = [tier for tier in INPUTS if tier != "gpu_check"]


def blocked(euid: int | None = None, docker_answers: bool | None = None,
            can_install: bool | None = None) -> dict[str, str]:
    """The tiers this machine cannot run, each with why: all but the GPU check's without root; the Docker tiers
    where no engine answers and none can be installed (no apt-get). Asked first by make test, so that it says so
    in its first second, runs the others, and fails naming these."""
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        return {tier: "needs root: its set-up installs packages, starts Slurm and makes the base image"
                for tier in NEEDS_ROOT}
    if docker_answers is None:
        docker_answers = subprocess.run(["docker", "info"], capture_output=True).returncode == 0 \
            if shutil.which("docker") else False
    if can_install is None:
        can_install = shutil.which("apt-get") is not None or shutil.which("dockerd") is not None
    if docker_answers or can_install:
        return {}
    return {tier: "needs Docker: no engine answers and apt-get cannot install one" for tier in sorted(DOCKER_TIERS)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=("fresh", "record", "key", "stale", "select", "blocked"))
    p.add_argument("tier", nargs="*", help="one tier (stale: one or more; blocked: none)")
    a = p.parse_args()
    if a.command == "blocked":  # the names on standard output, one line each with why on standard error
        found = blocked()
        for tier, why in found.items():
            print(f"tier-cache: {tier} cannot run here ({why})", file=sys.stderr)
        print(" ".join(found))
        return
    if not a.tier:
        p.error(f"{a.command} takes a tier")
    if a.command == "stale":  # no side effect: what `make test-system-prepare` asks before building for them
        no_venv = venv_packages() is None
        stale = [tier for tier in a.tier if stale_parts(tier, no_venv)]
        print(f"tier-cache: stale: {' '.join(stale) or 'none'}")
        sys.exit(0 if stale else 1)
    if len(a.tier) != 1:
        p.error(f"{a.command} takes one tier")
    tier = a.tier[0]
    if tier not in INPUTS:
        raise SystemExit(f"tier-cache: unknown tier '{tier}' (choose from: {', '.join(INPUTS)})")
    if a.command == "key":
        for part in parts_of(tier):
            digest, _, made_of = key_parts(tier, part)
            print(f"{part}: {digest}")
            print("\n".join(f"  {line}" for line in made_of))
    elif a.command == "fresh":
        if stale_parts(tier):
            sys.exit(1)
        when = passed(tier, key(tier, "features")[0], part="features")
        print(f"{tier}: passed at {when} on these same inputs; not run again (HVDBENCH_RERUN=1 runs it)")
        times = Path(os.environ.get("HVDBENCH_TEST_TIMES", "results/test-times"))
        times.mkdir(parents=True, exist_ok=True)
        (times / f"{tier}.wall").write_text("0 0 cached\n")
    elif a.command == "select":
        # the features passed on these inputs: only a change to code the lower tiers run, so the smoke tests only
        if stale_parts(tier) == ["whole"]:
            print(f" and {SMOKE_MARKER}")
            print(f"{tier}: its features passed on these inputs (bench/'s surface unchanged): its smoke tests only",
                  file=sys.stderr)
    else:
        if os.environ.get("PYTEST_ARGS", "").strip():
            return  # a partial run proves nothing about the tier
        for part in parts_of(tier):  # a smoke-only run leaves the features' key as it was when they passed
            digest, without_venv, _ = key_parts(tier, part)
            record(tier, digest, without_venv, part)


if __name__ == "__main__":
    main()
