"""Host side of the images: base image, builds, layer checks. Python with the Docker SDK, no shell strings.

    python -m tools.images base                                  # debootstrapped bookworm -> hvdbench-base:bookworm
    python -m tools.images build --stack current --flavor cpu    # -> hvdbench:current-cpu
    python -m tools.images build --stack current --flavor cuda   # -> hvdbench:current-cuda, hvdbench:latest
    python -m tools.images build ... --cache frameworks          # the gate's: kept if only bench/ changed
    python -m tools.images check-secrets IMAGE [--secret FILE]   # no layer holds the CA bundle's private certs
    python -m tools.images prune [--keep-gb N]                   # superseded build cache and untagged images

Builds need BuildKit (secrets, cache and bind mounts), which the Docker SDK's build API lacks, so they run
the docker CLI with DOCKER_BUILDKIT=1 (HVDBENCH_DOCKER picks the binary; a 20.10 client needs no buildx).
The machine's CA bundle (HVDBENCH_CA_BUNDLE, default /etc/ssl/certs/ca-certificates.crt) is passed as
the BuildKit secret "ca", so pip works behind a TLS-inspecting proxy without the bundle entering a layer.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKER_DIR = ROOT / "docker"
WHEELHOUSE = DOCKER_DIR / "wheelhouse"
# Horovod's sdist for the CUDA image (docker/Dockerfile.cuda mounts it), apart from the CPU image's wheelhouse: the
# two builds run at once in make test, and neither's files change the other's steps.
CUDA_SDIST = DOCKER_DIR / "sdist"
STACKS = DOCKER_DIR / "stacks"
FLAVORS = ("cpu", "cuda")
LOCAL_BASE = "hvdbench-base:bookworm"
DEFAULT_CA = "/etc/ssl/certs/ca-certificates.crt"
PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\s+(.+?)\s+-----END CERTIFICATE-----", re.S)


class ImageError(Exception):
    pass


def client(timeout: int = 600):
    """The engine's API client. ``timeout`` (s) bounds each API read: saving a multi-GB image for the layer
    scan can stay silent for longer than the SDK's default of 60 s on a busy machine."""
    import docker

    try:
        c = docker.from_env(timeout=timeout)
        c.ping()
    except docker.errors.DockerException as exc:
        raise ImageError(f"no Docker engine answers ({exc}); run tools/docker-up.sh") from None
    return c


def stacks() -> list[str]:
    return sorted(p.stem for p in STACKS.glob("*.env"))


def read_stack(stack: str) -> dict[str, str]:
    path = STACKS / f"{stack}.env"
    if not path.is_file():
        raise ImageError(f"unknown stack '{stack}' (choose from: {', '.join(stacks())})")
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def build_args(stack: str, flavor: str, base: str | None = None) -> dict[str, str]:
    """The Dockerfile's build args for a stack and flavour: FOO_CPU / FOO_CUDA become FOO."""
    if flavor not in FLAVORS:
        raise ImageError(f"unknown flavor '{flavor}' (choose from: {', '.join(FLAVORS)})")
    values = read_stack(stack)
    suffix = "_" + flavor.upper()
    args = {k: v for k, v in values.items() if not k.endswith(("_CPU", "_CUDA"))}
    args.update({k[: -len(suffix)]: v for k, v in values.items() if k.endswith(suffix)})
    args["FLAVOR"] = flavor
    if base:
        args["BASE_IMAGE"] = base
    from bench import __version__

    args["HVDBENCH_VERSION"] = __version__
    return args


def tags(stack: str, flavor: str) -> list[str]:
    out = [f"hvdbench:{stack}-{flavor}"]
    if (stack, flavor) == ("current", "cuda"):
        out += ["hvdbench:latest"]  # `hvdbench` means hvdbench:latest
    return out


def frameworks_tag(stack: str, flavor: str) -> str:
    """The image's "frameworks" stage (system, frameworks, Horovod; no bench): what the cluster's node image is
    built on and what the test SIFs are keyed by, so that a change to bench/ alone rebuilds neither."""
    return f"hvdbench:{stack}-{flavor}-frameworks"


# -- base image ---------------------------------------------------------------------------------------
def make_base(tag: str = LOCAL_BASE, suite: str = "bookworm", mirror: str = "http://deb.debian.org/debian") -> str:
    """A minimal Debian image made here (no registry needed): debootstrap, then docker import. Through the docker
    command alone, not the Python client: make test makes it before the venv exists (make test-system-install)."""
    docker = docker_cli()
    if subprocess.run([docker, "info"], capture_output=True).returncode != 0:
        raise ImageError("no Docker engine answers; run tools/docker-up.sh")
    if subprocess.run([docker, "image", "inspect", tag], capture_output=True).returncode == 0:
        print(f"images: {tag} exists")
        return tag
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is not installed (apt-get install debootstrap)")
    with tempfile.TemporaryDirectory(prefix="hvdbench-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        print(f"images: debootstrap {suite} into {rootfs}", flush=True)
        subprocess.run(["debootstrap", "--variant=minbase", suite, str(rootfs), mirror], check=True,
                       stdout=subprocess.DEVNULL)
        archive = Path(tmp) / "rootfs.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(rootfs, arcname=".")
        subprocess.run([docker, "import", str(archive), tag if ":" in tag else f"{tag}:latest"], check=True,
                       stdout=subprocess.DEVNULL)
    print(f"images: imported {tag}")
    return tag


# -- wheels for offline builds ------------------------------------------------------------------------
def has_pip(python: str) -> bool:
    return subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0


def stage_sdist(stack: str, python: str = sys.executable, directory: Path = WHEELHOUSE) -> None:
    """Horovod's sdist in ``directory`` (docker/wheelhouse, or its sdist/ for the CUDA image), so that no
    build downloads it again."""
    version = read_stack(stack)["HOROVOD_VERSION"]
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / f"horovod-{version}.tar.gz").is_file():
        return
    if not has_pip(python):
        # make test builds the CUDA image before the venv exists, with a Python that may have no pip: the
        # image's Horovod step then downloads the sdist itself (docker/build-horovod.sh).
        print(f"images: no pip for {python}: Horovod's sdist left to the build", flush=True)
        return
    subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d",
                    str(directory), f"horovod=={version}"], check=True)


# The CPU image's Python: Debian bookworm's python3 (the base of every stack's CPU flavour).
CPU_IMAGE_PYTHON = "3.11"


def stage_wheels(stack: str, python: str = sys.executable) -> Path:
    """Put into docker/wheelhouse what every CPU image build installs first: PyTorch's CPU wheel for the image's
    Python (from the stack's TORCH_INDEX_URL, or a local CPU wheel where pip's config points at one), Horovod's
    sdist, and the Horovod wheels the venv built (reused by the image build only when their cache key matches).
    The publish path and the image tests build through this one function, so the image users pull is the one
    the tests test. PyPI's torch is the CUDA build and brings Triton and the nvidia-* libraries: a CPU image
    never takes it (ImageError here, before any build, and the Dockerfile's own check after its installs)."""
    values = build_args(stack, "cpu")
    version = values["TORCH_VERSION"]
    if not has_pip(python):
        raise ImageError(f"the CPU image's build stages PyTorch's CPU wheel with pip, and {python} has none: install "
                         "python3-pip (or make venv, whose Python the build then takes)")
    WHEELHOUSE.mkdir(exist_ok=True)
    index = ["--extra-index-url", values["TORCH_INDEX_URL"]] if values.get("TORCH_INDEX_URL") else []
    tag = "cp" + CPU_IMAGE_PYTHON.replace(".", "")
    # A pinned release's wheel does not change: one already staged is not asked for again (where the index does not
    # answer, each ask costs pip's retries, about 9 s).
    if not list(WHEELHOUSE.glob(f"torch-{version}+cpu-{tag}-*.whl")):
        subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        "--implementation", "cp", "--python-version", CPU_IMAGE_PYTHON, "-d", str(WHEELHOUSE),
                        *index, f"torch=={version}"], check=True)
    wheels = sorted(WHEELHOUSE.glob(f"torch-{version}*-{tag}-*.whl"))
    if not any(w.name.startswith(f"torch-{version}+cpu-") for w in wheels):
        raise ImageError(f"the CPU image needs PyTorch's CPU wheel torch=={version}+cpu for Python "
                         f"{CPU_IMAGE_PYTHON}, and pip here found only {', '.join(w.name for w in wheels) or 'none'} "
                         f"(TORCH_INDEX_URL={values.get('TORCH_INDEX_URL') or 'unset'} did not answer?)")
    stage_sdist(stack, python)
    cache = Path(os.environ.get("HVDBENCH_WHEEL_CACHE", Path.home() / ".cache/hvdbench/wheels"))
    if cache.is_dir():
        shutil.copytree(cache, WHEELHOUSE / "horovod", dirs_exist_ok=True)
    return WHEELHOUSE


# -- build --------------------------------------------------------------------------------------------
def docker_cli() -> str:
    explicit = os.environ.get("HVDBENCH_DOCKER")
    if explicit:
        return explicit
    return "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"


# Stack bases that the debootstrapped LOCAL_BASE stands in for when no registry answers: the same Debian release.
LOCAL_BASE_FOR = ("debian:bookworm-slim", "debian:bookworm", "debian:12-slim", "debian:12")


def resolve_base(image: str, c=None) -> str:
    """The base to build from: ``image`` if the engine has it or can pull it; else, for a Debian bookworm
    base, the local debootstrapped one (made if missing), so that `make image` works where no image
    registry is reachable. Any other base that cannot be had is an error naming it."""
    c = c or client()
    try:
        c.images.get(image)
        return image
    except Exception:  # docker.errors.ImageNotFound
        pass
    try:
        c.images.pull(image)
        return image
    except Exception as exc:  # docker.errors.APIError: no registry, unknown image
        reason = (getattr(exc, "explanation", None) or str(exc)).splitlines()[0][:160]
    if image not in LOCAL_BASE_FOR:
        raise ImageError(f"cannot pull the base image {image} ({reason}); pull or load it, or pass --base")
    print(f"images: cannot pull {image} ({reason}); using {LOCAL_BASE} (debootstrapped Debian bookworm) instead",
          flush=True)
    return make_base(LOCAL_BASE)


def revision() -> str:
    """The commit an image is built from: HVDBENCH_REVISION, else GitHub's, else git's (+dirty for local changes)."""
    explicit = os.environ.get("HVDBENCH_REVISION") or os.environ.get("GITHUB_SHA")
    if explicit:
        return explicit
    try:
        sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def source() -> str:
    """Where the source lives (org.opencontainers.image.source): HVDBENCH_SOURCE, or the GitHub repository the
    workflow runs in, or the https URL of git's origin (never one carrying credentials), or nothing."""
    if os.environ.get("HVDBENCH_SOURCE"):
        return os.environ["HVDBENCH_SOURCE"]
    if os.environ.get("GITHUB_REPOSITORY"):
        return f"{os.environ.get('GITHUB_SERVER_URL', 'https://github.com')}/{os.environ['GITHUB_REPOSITORY']}"
    url = subprocess.run(["git", "-C", str(ROOT), "remote", "get-url", "origin"], capture_output=True,
                         text=True).stdout.strip()
    return url if url.startswith("https://") and "@" not in url else ""


def stamp() -> dict[str, str]:
    """The build args that say which commit an image was built from (after the self-test in both Dockerfiles, so
    a new commit changes only the image's metadata)."""
    return {"HVDBENCH_REVISION": revision(), "HVDBENCH_SOURCE": source()}


def recipe(stack: str, flavor: str, base: str | None = None,
           extra_args: dict[str, str] | None = None) -> tuple[Path, dict[str, str]]:
    """The Dockerfile and build args of a stack and flavour: what `build` runs and `publish --dry-run` shows."""
    args = build_args(stack, flavor, base)
    args.update(extra_args or {})
    return DOCKER_DIR / args.pop("DOCKERFILE", "Dockerfile"), args


def build(stack: str, flavor: str, base: str | None = None, extra_args: dict[str, str] | None = None,
          ca_bundle: str | None = None, cache: str | None = None) -> list[str]:
    """Build the frameworks stage, then the image on it. ``cache="frameworks"`` (the gate's builds) keeps the
    image when nothing but this package changed since it was built (package_key)."""
    dockerfile, args = recipe(stack, flavor, base, {**stamp(), **(extra_args or {})})
    if base is None:
        args["BASE_IMAGE"] = resolve_base(args["BASE_IMAGE"])
    if dockerfile.name == "Dockerfile.cuda":
        stage_sdist(stack, directory=CUDA_SDIST)
    else:
        stage_wheels(stack)
    cmd = [docker_cli(), "build", "--network", "host", "-f", str(dockerfile)]
    for key, value in args.items():
        cmd += ["--build-arg", f"{key}={value}"]
    ca = ca_bundle if ca_bundle is not None else os.environ.get("HVDBENCH_CA_BUNDLE", DEFAULT_CA)
    if ca and Path(ca).is_file():
        cmd += ["--secret", f"id=ca,src={ca}"]
    # The frameworks stage first (its own tag), then the image on that tag (FRAMEWORKS): the image's build never
    # runs the frameworks stage's steps again, whatever BuildKit's cache holds. With --cache frameworks a
    # frameworks stage whose inputs did not change since its tag was built is not built again (frameworks_key).
    staged = CUDA_SDIST if dockerfile.name == "Dockerfile.cuda" else WHEELHOUSE
    for target, names in (("frameworks", [frameworks_tag(stack, flavor)]), ("image", tags(stack, flavor))):
        if target == "frameworks" and cache == "frameworks":
            fkey = frameworks_key(dockerfile, staged, args)
            if kept(names[0], fkey):
                print(f"images: {names[0]} kept: its inputs did not change since it was built (--cache frameworks)",
                      flush=True)
                continue
        if target == "image":
            cmd += ["--build-arg", f"FRAMEWORKS={frameworks_tag(stack, flavor)}"]
        if target == "image" and cache == "frameworks":
            key = package_key(frameworks_tag(stack, flavor), [dockerfile, *PACKAGE_FILES], args)
            if kept(names[0], key):
                print(f"images: {names[0]} kept: only this package changed since it was built (--cache frameworks; "
                      "the system tiers bind the checkout's bench/ over the one it holds)", flush=True)
                return names
        step = [*cmd, "--target", target, *(arg for name in names for arg in ("-t", name)), str(ROOT)]
        print("images:", " ".join(step), flush=True)
        done = subprocess.run(step, env=dict(os.environ, DOCKER_BUILDKIT="1"))
        if done.returncode != 0:
            raise ImageError(f"docker build of {names[0]} failed (exit {done.returncode})")
        if target == "image" and cache == "frameworks":
            remember(names[0], key)
        if target == "frameworks" and cache == "frameworks":
            remember(names[0], fkey)
    return tags(stack, flavor)


# -- the gate's builds: no new image for a change to this package alone ---------------------------------
# The system tiers run the checkout's bench/ bound over the copy an image holds (package_dirs; tests/conftest.py
# and tools/cluster.py), so a change to bench/ alone needs no new image there. `build --cache frameworks` builds
# the frameworks stage (cached: seconds) and keeps the image when its package key is the one it was built with:
# the frameworks stage's image ID, the Dockerfile, what the image stage copies other than bench/
# (PACKAGE_FILES), and the build args less the commit stamp. The key is kept beside the image's ID in
# IMAGE_KEYS, so an image built or retagged since (make image, make publish) is never taken for the kept one.
# `make image` and `make publish` never pass it: the images users get hold the bench they were built from,
# and the image tier's publish round trip proves it (tests/system/test_publish.py).
IMAGE_KEYS = Path(os.environ.get("HVDBENCH_IMAGE_KEYS", "/var/cache/hvdbench/image-keys"))
PACKAGE_FILES = (ROOT / "pyproject.toml", DOCKER_DIR / "entrypoint.sh", DOCKER_DIR / "mpijob-ssh.sh")
STAMP_ARGS = ("HVDBENCH_REVISION", "HVDBENCH_SOURCE")


def image_id(image: str) -> str | None:
    """The engine's ID of ``image``, or None where it has none by that name."""
    done = subprocess.run([docker_cli(), "image", "inspect", "-f", "{{.Id}}", image], capture_output=True, text=True)
    if done.returncode != 0 and "No such" not in done.stderr:
        raise ImageError(f"no Docker engine answers ({done.stderr.strip()[:200]}); run tools/docker-up.sh")
    return done.stdout.strip() if done.returncode == 0 else None


def package_key(frameworks: str, files: list[Path], args: dict[str, str]) -> str:
    """SHA-256 of what an image adds to its frameworks stage, less this package: the stage's image ID, the
    ``files`` (Dockerfile, scripts, pyproject.toml) and the build ``args`` less the commit stamp."""
    digest = hashlib.sha256(f"frameworks {image_id(frameworks)}\n".encode())
    for path in files:
        digest.update(f"{path.relative_to(ROOT)}\n".encode() + path.read_bytes() + b"\n")
    for name, value in sorted(args.items()):
        if name not in STAMP_ARGS:
            digest.update(f"{name}={value}\n".encode())
    return digest.hexdigest()


# What the frameworks stage reads: the Dockerfile up to the image stage, the files its steps copy, the staged
# wheels or sdist it mounts, the build args less the commit stamp, and the base image's ID.
FRAMEWORKS_FILES = (DOCKER_DIR / "requirements-image.txt", DOCKER_DIR / "build-horovod.sh", DOCKER_DIR / "horovod",
                    ROOT / "requirements" / "hybrid.txt")


def frameworks_key(dockerfile: Path, staged: Path, args: dict[str, str]) -> str:
    """SHA-256 of every input of ``dockerfile``'s frameworks stage (FRAMEWORKS_FILES, the ``staged`` folder's files
    by name and content, the base image's ID, and of ``args`` those its text declares: an ARG declared only in
    the image stage, as the CUDA image's MATPLOTLIB_VERSION, cannot change the frameworks): the key its tag is
    kept by."""
    text = dockerfile.read_text().split("\nFROM ${FRAMEWORKS} AS image", 1)[0]
    declared = set(re.findall(r"^ARG (\w+)", text, re.M))
    args = {name: value for name, value in args.items() if name in declared}
    digest = hashlib.sha256(text.encode())
    digest.update(f"base {image_id(args.get('BASE_IMAGE', ''))}\n".encode())
    files = [(entry.parent if entry.is_file() else entry, f) for entry in (*FRAMEWORKS_FILES, staged)
             for f in ([entry] if entry.is_file() else sorted(p for p in entry.rglob("*") if p.is_file()))]
    for top, path in files:
        digest.update(f"{top.name}/{path.relative_to(top)}\n".encode())
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    for name, value in sorted(args.items()):
        if name not in STAMP_ARGS:
            digest.update(f"{name}={value}\n".encode())
    return digest.hexdigest()


def _key_file(tag: str) -> Path:
    return IMAGE_KEYS / (re.sub(r"[^A-Za-z0-9_.-]", "_", tag) + ".key")


def kept(tag: str, key: str) -> bool:
    """``tag`` names the image that was built with package key ``key``."""
    try:
        recorded = _key_file(tag).read_text().split()
    except OSError:
        return False
    return recorded == [key, image_id(tag) or "none"]


def remember(tag: str, key: str) -> None:
    IMAGE_KEYS.mkdir(parents=True, exist_ok=True)
    _key_file(tag).write_text(f"{key} {image_id(tag)}\n")


@functools.cache
def package_dirs(image: str) -> tuple[str, ...]:
    """Where ``image`` holds this package: bench/ in the site-packages of each Python environment it runs bench
    in (the CPU image's one; the CUDA image's torch and tf environments, bench/launching/envs.py). Asked once
    per image and process."""
    probe = ('for py in python3 "$HVDBENCH_PYTHON_TORCH" "$HVDBENCH_PYTHON_TF"; do [ -z "$py" ] || '
             '"$py" -I -c "import bench, os; print(os.path.dirname(bench.__file__))"; done')
    done = subprocess.run([docker_cli(), "run", "--rm", "--network", "none", "--entrypoint", "bash", image, "-c",
                           probe], capture_output=True, text=True, timeout=300)
    dirs = tuple(sorted({line.strip() for line in done.stdout.splitlines() if line.strip().startswith("/")}))
    if done.returncode != 0 or not dirs:
        raise ImageError(f"cannot find bench in {image}: {done.stderr.strip()[-300:]}")
    return dirs


def bench_binds(image: str, source: Path = ROOT / "bench") -> list[str]:
    """Docker's read-only binds of ``source`` (the checkout's bench/) over every copy of the package in
    ``image``, as ``docker run -v`` and compose's volumes write them."""
    return [f"{source.resolve()}:{target}:ro" for target in package_dirs(image)]


# -- disk ---------------------------------------------------------------------------------------------
# BuildKit keeps the cache of every build step it ran, superseded ones too, until its own collector (off on
# a plain dockerd) removes them: a machine that ran the gate every day filled 41 GB with them. The gate calls
# prune after its builds: the build cache beyond BUILD_CACHE_GB goes, least recently used first (the current
# builds' steps were used last, so they stay), and so do the hvdbench images no tag names any more.
BUILD_CACHE_GB = int(os.environ.get("HVDBENCH_BUILD_CACHE_GB", "25"))


def prune(keep_gb: int = BUILD_CACHE_GB) -> None:
    docker = docker_cli()
    for cmd in ([docker, "builder", "prune", "--force", "--keep-storage", f"{keep_gb}GB"],
                [docker, "image", "prune", "--force", "--filter", "label=org.opencontainers.image.title=hvdbench"]):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ImageError(f"{' '.join(cmd[1:3])} failed: {done.stderr.strip() or done.stdout.strip()}")
        said = done.stdout.strip().splitlines()
        print(f"images: {' '.join(cmd[1:3])}: {said[-1] if said else 'done'}")


# -- secrets ------------------------------------------------------------------------------------------
def pem_bodies(data: bytes) -> set[bytes]:
    return {re.sub(rb"\s+", b"", m) for m in PEM.findall(data)}


def image_file(image: str, path: str) -> bytes:
    """A file from an image's final filesystem."""
    c = client()
    container = c.containers.create(image, entrypoint=["true"])
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.getmembers()[0]
            return tar.extractfile(member).read()
    finally:
        container.remove()


SCAN_CACHE = Path(os.environ.get("HVDBENCH_SCAN_CACHE", "/var/cache/hvdbench/layer-scans"))


def leaks(data: bytes, secret: bytes, private: set[bytes]) -> bool:
    """Whether one file's bytes hold the secret file as a whole or one of its private certificates (PEM
    bodies compared with their line breaks removed, so a re-wrapped copy is caught too)."""
    if secret in data:
        return True
    if b"CERTIFICATE" not in data:
        return False
    flat = re.sub(rb"\s+", b"", data)
    return any(body in flat for body in private)


def layer_dirs(image: str) -> list[tuple[str, Path]] | None:
    """(diff id, directory) of each layer, bottom first, where the engine keeps layers as overlay2 directories
    that this process can read (root on the engine's host); None otherwise. A diff id is the sha256 of the
    layer's uncompressed tar: two layers with one id hold the same files."""
    attrs = client().images.get(image).attrs
    driver = attrs.get("GraphDriver") or {}
    if driver.get("Name") != "overlay2":
        return None
    data = driver.get("Data") or {}
    dirs = [d for d in [data.get("UpperDir", ""), *(data.get("LowerDir") or "").split(":")] if d][::-1]
    ids = (attrs.get("RootFS") or {}).get("Layers") or []
    if len(dirs) != len(ids) or not all(os.access(d, os.R_OK | os.X_OK) for d in dirs):
        return None
    return list(zip(ids, map(Path, dirs), strict=True))


def _scan_dir(top: Path, secret: bytes, private: set[bytes]) -> list[str]:
    hits = []
    for folder, _, files in os.walk(top):
        for name in files:
            path = Path(folder, name)
            if path.is_file() and not path.is_symlink() and leaks(path.read_bytes(), secret, private):
                hits.append(str(path.relative_to(top)))
    return hits


def _scan_saved(image: str, secret: bytes, private: set[bytes]) -> list[str]:
    hits = []
    with tempfile.TemporaryFile() as saved:
        for chunk in client().images.get(image).save(named=False):
            saved.write(chunk)
        saved.seek(0)
        with tarfile.open(fileobj=saved) as outer:
            for layer in outer.getmembers():
                if not layer.name.endswith("layer.tar"):
                    continue
                with tarfile.open(fileobj=outer.extractfile(layer)) as inner:
                    for member in inner.getmembers():
                        if member.isfile() and leaks(inner.extractfile(member).read(), secret, private):
                            hits.append(f"{layer.name}:{member.name}")
    return hits


def secret_hits(image: str, secret: bytes, public: set[bytes] | None = None, cache: Path | None = SCAN_CACHE,
                how: str = "auto") -> list[str]:
    """Layer files holding the secret file as a whole, or any certificate of it that is not public
    (public: certificates the image is expected to carry anyway, e.g. its own ca-certificates bundle).

    how: "dirs" reads each layer's overlay2 directory, "save" reads `docker save`'s tar of the whole image,
    "auto" the first where the engine allows it. With layer directories, a layer found clean is recorded in
    ``cache`` under its diff id and the secret's digest, and not read again: an image that differs from the
    last one scanned in its top layer (a change to bench/) costs the top layer's scan alone."""
    private = pem_bodies(secret) - (public or set())
    layers = layer_dirs(image) if how in ("auto", "dirs") else None
    if layers is None:
        if how == "dirs":
            raise ImageError(f"{image}: the engine's layer directories cannot be read here")
        return _scan_saved(image, secret, private)
    digest = hashlib.sha256(secret + b"\0" + b"\0".join(sorted(private))).hexdigest()[:16]
    record = cache / digest if cache else None
    hits = []
    for diff_id, top in layers:
        done = record / diff_id.replace(":", "-") if record else None
        if done and done.exists():
            continue
        found = _scan_dir(top, secret, private)
        hits += [f"{diff_id[:19]}:{h}" for h in found]
        if done and not found:
            done.parent.mkdir(parents=True, exist_ok=True)
            done.touch()
    return hits


def check_secrets(image: str, secret_path: str = DEFAULT_CA) -> list[str]:
    secret = Path(secret_path).read_bytes()
    try:
        public = pem_bodies(image_file(image, "/etc/ssl/certs/ca-certificates.crt"))
    except Exception:  # no bundle in the image
        public = set()
    return secret_hits(image, secret, public)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("base", help="make the local base image (debootstrap + import)")
    b.add_argument("--tag", default=LOCAL_BASE)
    bd = sub.add_parser("build", help="build one image")
    bd.add_argument("--stack", default="current")
    bd.add_argument("--flavor", default="cuda")
    bd.add_argument("--base", help="base image instead of the stack's (e.g. hvdbench-base:bookworm)")
    bd.add_argument("--cache", choices=["frameworks"],
                    help="frameworks: keep the image where only this package changed since it was built (the "
                    "system tiers bind the checkout's bench/ over it); never for images users get")
    bd.add_argument("--self-test-modes", help="the CUDA image's self-test: the modes whose 2-process CPU run it "
                    "makes (default: every mode)")
    cs = sub.add_parser("check-secrets", help="fail if an image layer holds the CA bundle's private certificates")
    cs.add_argument("image")
    cs.add_argument("--secret", default=os.environ.get("HVDBENCH_CA_BUNDLE", DEFAULT_CA))
    sub.add_parser("stacks", help="list the stacks")
    pr = sub.add_parser("prune", help="the build cache beyond --keep-gb (least recently used first) and the "
                        "hvdbench images no tag names")
    pr.add_argument("--keep-gb", type=int, default=BUILD_CACHE_GB)
    a = p.parse_args()
    try:
        if a.command == "base":
            make_base(a.tag)
        elif a.command == "build":
            extra = {}
            if a.self_test_modes:
                known = {"torch-ddp", "torch-horovod", "tf-horovod", "tf-native"}
                modes = a.self_test_modes.split()
                if not modes or set(modes) - known:
                    raise ImageError(f"--self-test-modes takes modes among {', '.join(sorted(known))} "
                                     f"(got {a.self_test_modes!r})")
                extra["SELF_TEST_MODES"] = " ".join(modes)
            print("images: ready:", ", ".join(build(a.stack, a.flavor, a.base, extra, cache=a.cache)))
        elif a.command == "check-secrets":
            hits = check_secrets(a.image, a.secret)
            if hits:
                raise ImageError(f"{a.image}: secret material in layers: {', '.join(hits)}")
            print(f"images: {a.image}: no layer holds {a.secret} or its private certificates")
        elif a.command == "prune":
            prune(a.keep_gb)
        else:
            print("\n".join(stacks()))
    except (ImageError, subprocess.CalledProcessError) as exc:
        print(f"images: error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
