"""Host side of the SIFs: build one from the local Docker image, or from a generated definition file.

    python -m tools.sif image --stack current --flavor cpu     # hvdbench:current-cpu -> hvdbench-current-cpu.sif
    python -m tools.sif def --stack current --flavor cpu --base hvdbench-base:bookworm
    python -m tools.sif pull --registry ghcr.io/OWNER --stack current --flavor cpu   # the published image
    python -m tools.sif runtime                                 # the apptainer/singularity used

The runtime is HVDBENCH_APPTAINER, else `apptainer` or `singularity` on PATH, else the one
tools/apptainer-up.sh set up. From an image, `docker save` writes an archive that
`apptainer build ... docker-archive://` converts (no registry, no access to the engine's socket needed), with
Apptainer's layer cache off (the layers are in the engine already) and the archive deleted as soon as Apptainer
has copied its layers (its "Extracting OCI image" line): the archive, that copy, the root filesystem, the
squashfs and the SIF are then never all on disk at once. Before, the CUDA image's build still held the 13.6 GB
archive, the layer copy and the root filesystem when it squashed, and ran out of 39 GB here
(docs/measured/2026-11-29-cuda-sif.md).
From a definition file, the %files paths are relative to the repository root, and the machine's CA
bundle is bound to /run/secrets/ca for pip (as the Docker build's secret: never copied into the image).
--base replaces the file's `Bootstrap: docker` base with a local Docker image (this machine reaches no
registry). A SIF is written to a temporary name and renamed, so a failed build leaves no partial file, and
hvdbench.sif beside it is pointed at it (the name the batch scripts and the README's srun line use);
a build whose inputs did not change since the last one (same image ID, or same definition, files and base)
is skipped unless --force. The key of what it was built from is kept next to it (<sif>.key).

--compression zstd squashes the SIF with zstd at level 3 instead of Apptainer's gzip: measured here on the
1.1 GiB CPU SIF, 47-52 s against 171-213 s for gzip, 2 % larger (docs/measured/2026-11-26-sif-compression.md).
It needs a runtime that reads zstd squashfs (Apptainer, or SingularityCE 3.9+, on a kernel with
SQUASHFS_ZSTD or squashfuse built with zstd), so gzip stays the default for SIFs that travel. A pull takes the
same option (apptainer build from the docker:// reference: `apptainer pull` itself squashes with gzip only).

--cache frameworks keys the build by its heavy part only: the image's frameworks stage
(hvdbench:STACK-FLAVOR-frameworks), or the definition and the files it copies in less this package's own
(bench/, pyproject.toml). The SIF's bench may then be older than the checkout's: the tests
bind the checkout's bench over it (APPTAINER_BIND), so a change to bench/ alone rebuilds no SIF.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tools import images, publish

ROOT = Path(__file__).resolve().parents[1]

SETUP_BIN = Path(os.environ.get("HVDBENCH_APPTAINER_DIR", "/var/cache/hvdbench/apptainer")) / "bin"


class SifError(Exception):
    pass


def runtime() -> str:
    """The container runtime's executable: apptainer, or singularity (same command line)."""
    explicit = os.environ.get("HVDBENCH_APPTAINER")
    if explicit:
        if shutil.which(explicit) is None:
            raise SifError(f"HVDBENCH_APPTAINER={explicit} is not an executable")
        return shutil.which(explicit)
    for name in ("apptainer", "singularity"):
        found = shutil.which(name) or shutil.which(name, path=str(SETUP_BIN))
        if found:
            return found
    raise SifError("neither apptainer nor singularity is installed; run `make apptainer-up` "
                   "(or install Apptainer, https://apptainer.org/docs/admin/main/installation.html)")


def default_output(stack: str, flavor: str) -> Path:
    return ROOT / f"hvdbench-{stack}-{flavor}.sif"


def image_id(image: str) -> str:
    try:
        found = images.image_id(image)
    except images.ImageError as exc:
        raise SifError(str(exc)) from None
    if found is None:
        raise SifError(f"no local Docker image {image}: build it first (make image STACK=... FLAVOR=...)")
    return found


# mksquashfs's arguments per --compression; gzip is Apptainer's own default (every runtime reads it).
COMPRESSIONS = {"gzip": [], "zstd": ["-comp", "zstd", "-Xcompression-level", "3"]}


def squash_options(compression: str) -> tuple[list[str], str]:
    """(apptainer build's options, the words the SIF's key gains) for ``compression``: gzip adds neither, so a
    SIF built before the option existed keeps its key."""
    if compression not in COMPRESSIONS:
        raise SifError(f"unknown compression {compression!r}; choose one of {', '.join(COMPRESSIONS)}")
    args = COMPRESSIONS[compression]
    return (["--mksquashfs-args", " ".join(args)], f" squashfs {compression}") if args else ([], "")


def _up_to_date(out: Path, key: str) -> bool:
    side = out.with_name(out.name + ".key")
    return out.is_file() and side.is_file() and side.read_text().strip() == key


def _apptainer(verb: str, options: list[str], dest: Path, target: str, cwd: Path, binds: list[Path], what: str,
               on_line: Callable[[str], None] | None = None, env: dict[str, str] | None = None) -> None:
    """``apptainer VERB --force OPTIONS DEST TARGET``, its messages passed on to standard error line by line (and to
    ``on_line``); a failure is one SifError naming ``what``."""
    # The set-up's wrapper shows the host's directories inside its own root; these must be among them.
    env = dict(os.environ, **(env or {}), HVDBENCH_APPTAINER_BINDS=" ".join(
        [os.environ.get("HVDBENCH_APPTAINER_BINDS", ""), *{str(p.resolve()) for p in binds}]).strip())
    cmd = [runtime(), verb, "--force", *options, str(dest), target]
    print("sif:", " ".join(cmd), flush=True)
    with subprocess.Popen(cmd, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True, errors="replace") as proc:
        try:
            for line in proc.stderr:
                sys.stderr.write(line)
                sys.stderr.flush()
                if on_line is not None:
                    on_line(line)
        except BaseException:
            proc.kill()
            raise
    if proc.returncode != 0:
        raise SifError(f"apptainer {verb} of {what} failed (exit {proc.returncode})")


def _build(target: str, out: Path, key: str, options: list[str], cwd: Path, binds: list[Path],
           verb: str = "build", done_word: str = "built", start: float | None = None,
           on_line: Callable[[str], None] | None = None, env: dict[str, str] | None = None) -> Path:
    """apptainer build (or pull) into a temporary file beside ``out``, then rename; records ``key``. ``start``:
    when the build began, where an earlier step (docker save) belongs to it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.partial")
    start = time.monotonic() if start is None else start
    try:
        _apptainer(verb, options, tmp, target, cwd, binds, out.name, on_line, env)
        out.with_name(out.name + ".key").unlink(missing_ok=True)  # never an old key beside a new SIF
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    out.with_name(out.name + ".key").write_text(key + "\n")
    print(f"sif: {done_word} {out} ({out.stat().st_size / 2**30:.2f} GiB) in "
          f"{time.monotonic() - start:.0f} s", flush=True)
    return out


def _docker_save(image: str, folder: Path) -> Path:
    archive = folder / (re.sub(r"[^A-Za-z0-9_.-]", "_", image) + ".tar")
    subprocess.run([images.docker_cli(), "save", "-o", str(archive), image], check=True)
    return archive


# Apptainer's layer cache off for a build from a local image: with it on, a copy of every layer would stay in
# ~/.apptainer (7.4 GB for the CUDA image), of layers the engine holds anyway.
NO_LAYER_CACHE = {"APPTAINER_DISABLE_CACHE": "true", "SINGULARITY_DISABLE_CACHE": "true"}
UNPACKING = "Extracting OCI image"  # Apptainer's line once it has copied an archive's layers


def from_image(stack: str, flavor: str, out: Path | None = None, force: bool = False, cache: str = "inputs",
               compression: str = "gzip") -> Path:
    """The SIF of the local Docker image hvdbench:<stack>-<flavor>."""
    image = images.tags(stack, flavor)[0]
    out = Path(out or default_output(stack, flavor)).resolve()
    squash, squash_key = squash_options(compression)
    if cache == "frameworks":
        heavy = images.frameworks_tag(stack, flavor)
        key = f"frameworks {heavy} {image_id(heavy)}{squash_key}"
    else:
        key = f"image {image} {image_id(image)}{squash_key}"
    if not force and _up_to_date(out, key):
        print(f"sif: {out} is up to date ({key})")
        return out
    runtime()  # fail before the minutes `docker save` takes
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".hvdbench-sif-", dir=out.parent) as tmp:
        archive = _docker_save(image, Path(tmp))

        def read_no_more(line: str) -> None:  # Apptainer has its own copy of the layers now
            if UNPACKING in line:
                archive.unlink(missing_ok=True)

        return _build(f"docker-archive://{archive}", out, key, squash, out.parent, [Path(tmp), out.parent],
                      start=start, on_line=read_no_more, env=NO_LAYER_CACHE)


MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json"])


def _registry_get(url: str, method: str = "HEAD", token: str | None = None):
    import urllib.request

    headers = {"Accept": MANIFEST_TYPES, **({"Authorization": f"Bearer {token}"} if token else {})}
    return urllib.request.urlopen(urllib.request.Request(url, method=method, headers=headers), timeout=20)


def _bearer_token(challenge: str) -> str | None:
    """A token for a registry that answered 401 with a Bearer challenge (GHCR gives anonymous pull tokens; a
    private image takes APPTAINER_DOCKER_USERNAME / APPTAINER_DOCKER_PASSWORD, as apptainer itself does)."""
    import base64
    import json
    import urllib.parse
    import urllib.request

    if not challenge.lower().startswith("bearer "):
        return None
    fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    url = fields.pop("realm", "") + "?" + urllib.parse.urlencode(fields)
    request = urllib.request.Request(url)
    user, password = os.environ.get("APPTAINER_DOCKER_USERNAME"), os.environ.get("APPTAINER_DOCKER_PASSWORD")
    if user and password:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    body = json.loads(urllib.request.urlopen(request, timeout=20).read())
    return body.get("token") or body.get("access_token")


def resolve_digest(reference: str) -> tuple[str, bool]:
    """(the manifest digest REGISTRY/NAME:TAG names now, whether the registry speaks plain HTTP), asked of the
    registry's API, https first; the digest is what `docker push` printed and what `docker pull` records."""
    import urllib.error

    name, _, tag = reference.rpartition(":")
    host, _, path = name.partition("/")
    reasons = []
    for scheme in ("https", "http"):
        url = f"{scheme}://{host}/v2/{path}/manifests/{tag}"
        try:
            try:
                answer = _registry_get(url)
            except urllib.error.HTTPError as exc:
                if exc.code != 401:
                    raise
                answer = _registry_get(url, token=_bearer_token(exc.headers.get("WWW-Authenticate", "")))
            digest = answer.headers.get("Docker-Content-Digest", "")
            if not digest.startswith("sha256:"):
                raise SifError(f"{host} gave no digest for {reference}")
            return digest, scheme == "http"
        except urllib.error.HTTPError as exc:
            raise SifError(f"{host} has no {path}:{tag} (HTTP {exc.code})" if exc.code == 404 else
                           f"{host} refused {reference} (HTTP {exc.code} {exc.reason})") from None
        except (urllib.error.URLError, OSError) as exc:
            reasons.append(f"{scheme}: {getattr(exc, 'reason', exc)}")
    raise SifError(f"registry {host} does not answer ({'; '.join(reasons)})")


def pull(registry: str, stack: str, flavor: str, out: Path | None = None, force: bool = False,
         compression: str = "gzip") -> Path:
    """The published REGISTRY/hvdbench:<stack>-<flavor> as a SIF, pulled by its digest: the SIF's labels then name
    the digest (org.label-schema.usage.singularity.deffile.from), which every result run in it records. A pull of
    the digest the SIF already holds (squashed alike) is skipped unless --force. Another compression than gzip
    converts through `apptainer build`, the same conversion with mksquashfs's arguments."""
    squash, squash_key = squash_options(compression)
    images.build_args(stack, flavor)  # validates the stack and flavour
    out = Path(out or default_output(stack, flavor)).resolve()
    reference = f"{publish.check_registry(registry)}/{publish.REPOSITORY}:{stack}-{flavor}"
    digest, plain_http = resolve_digest(reference)
    pinned = f"{reference.rpartition(':')[0]}@{digest}"
    key = f"pulled {pinned}{squash_key}"
    if not force and _up_to_date(out, key):
        print(f"sif: {out} is up to date ({pinned})")
        return out
    return _build(f"docker://{pinned}", out, key, [*squash, *(["--no-https"] if plain_http else [])], out.parent,
                  [out.parent], verb="build" if squash else "pull", done_word="pulled")


def localize(text: str, archive: Path) -> str:
    """A definition file whose base is a `docker save` archive instead of a registry image."""
    new, n = re.subn(r"^Bootstrap: docker\nFrom: .*$", f"Bootstrap: docker-archive\nFrom: {archive}", text,
                     count=1, flags=re.M)
    if n != 1:
        raise SifError("the definition file does not start from `Bootstrap: docker`")
    return new


CACHES = ("inputs", "frameworks")
PACKAGE_SOURCES = ("bench", "pyproject.toml")  # what --cache frameworks leaves out of a key


def _files_digest(text: str, h, skip: tuple[str, ...] = ()) -> None:
    """Hash the sources the %files section copies in (the build's other inputs), less those in ``skip``."""
    files = text.split("%files\n", 1)[1].split("\n%", 1)[0].splitlines()
    for line in files:
        if line.split()[0] in skip:
            continue
        src = ROOT / line.split()[0]
        for p in sorted([src] if src.is_file() else (q for q in src.rglob("*") if q.is_file())):
            if "__pycache__" not in p.parts:
                h.update(str(p.relative_to(ROOT)).encode())
                h.update(p.read_bytes())


def from_definition(stack: str, flavor: str, out: Path | None = None, base: str | None = None,
                    force: bool = False, cache: str = "inputs", compression: str = "gzip") -> Path:
    """Build singularity/hvdbench-<stack>-<flavor>.def (optionally on a local Docker base image)."""
    definition = ROOT / "singularity" / f"hvdbench-{stack}-{flavor}.def"
    if not definition.is_file():
        raise SifError(f"no definition file {definition.relative_to(ROOT)} (make singularity)")
    out = Path(out or default_output(stack, flavor)).resolve()
    text = definition.read_text()
    if flavor == "cpu":
        images.stage_wheels(stack)  # the CPU definition installs PyTorch's CPU wheel from it, as the CPU image does
    squash, squash_key = squash_options(compression)
    h = hashlib.sha256(text.encode())
    _files_digest(text, h, PACKAGE_SOURCES if cache == "frameworks" else ())
    key = (f"definition {definition.name} {cache} base {image_id(base) if base else 'registry'} {h.hexdigest()}"
           f"{squash_key}")
    if not force and _up_to_date(out, key):
        print(f"sif: {out} is up to date ({key[:80]}...)")
        return out
    runtime()
    options = (["--fakeroot"] if os.geteuid() == 0 else []) + squash
    ca = os.environ.get("HVDBENCH_CA_BUNDLE", images.DEFAULT_CA)
    if ca and Path(ca).is_file():
        options += ["--bind", f"{ca}:/run/secrets/ca"]
    with tempfile.TemporaryDirectory(prefix=".hvdbench-sif-", dir=ROOT) as tmp:
        if base:
            text = localize(text, _docker_save(base, Path(tmp)))
        local = Path(tmp) / definition.name
        local.write_text(text)
        return _build(str(local), out, key, options, ROOT, [Path(tmp), out.parent, ROOT])


LINK = "hvdbench.sif"  # what the batch scripts (singularity/slurm/common.sh) and the README's srun line run


def link_default(out: Path) -> None:
    """Point hvdbench.sif beside ``out`` at it (a relative link, replaced in one step): the name the batch scripts
    and `srun singularity exec hvdbench.sif` use, so the SIF last built or pulled there is the one they run. A
    hvdbench.sif that is a file of its own (a SIF pulled under that name) is left alone, and said so."""
    link = out.parent / LINK
    if out.name == LINK:
        return
    if link.exists() and not link.is_symlink():
        print(f"sif: {link} is a file of its own, left as it is; the batch scripts run it unless HVDBENCH_SIF={out}")
        return
    tmp = out.parent / f".{LINK}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(out.name)
    os.replace(tmp, link)
    print(f"sif: {link} -> {out.name} (what the batch scripts run by default)")


def compression_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compression", choices=list(COMPRESSIONS), default="gzip",
                        help="the squashfs compression: gzip (default, every runtime reads it) or zstd (level 3: "
                             "about 4 times faster to build, 2 %% larger)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (("image", "the SIF of the local Docker image hvdbench:STACK-FLAVOR"),
                       ("def", "build singularity/hvdbench-STACK-FLAVOR.def")):
        s = sub.add_parser(name, help=text)
        s.add_argument("--stack", default="current")
        s.add_argument("--flavor", default="cpu")
        s.add_argument("--output", type=Path, help="default: hvdbench-STACK-FLAVOR.sif in the repository root")
        s.add_argument("--force", action="store_true", help="rebuild even when the inputs did not change")
        s.add_argument("--cache", choices=CACHES, default="inputs",
                       help="what keys the skip: every input (default), or the frameworks part alone (tests)")
        compression_option(s)
        if name == "def":
            s.add_argument("--base", help="a local Docker image as the base (e.g. hvdbench-base:bookworm)")
    pl = sub.add_parser("pull", help="pull the published REGISTRY/hvdbench:STACK-FLAVOR into a SIF, by digest")
    pl.add_argument("--registry", required=True, help="HOST[:PORT][/path], e.g. ghcr.io/owner or 127.0.0.1:5000")
    pl.add_argument("--stack", default="current")
    pl.add_argument("--flavor", default="cpu")
    pl.add_argument("--output", type=Path, help="default: hvdbench-STACK-FLAVOR.sif in the repository root")
    pl.add_argument("--force", action="store_true", help="pull even when the SIF holds that digest already")
    compression_option(pl)
    sub.add_parser("runtime", help="print the runtime used")
    a = p.parse_args()
    try:
        if a.command == "runtime":
            print(runtime())
            return
        out = Path(a.output or default_output(a.stack, a.flavor)).resolve()
        if a.command == "image":
            images.build_args(a.stack, a.flavor)  # validates the stack and flavour
            from_image(a.stack, a.flavor, out, a.force, a.cache, a.compression)
        elif a.command == "def":
            from_definition(a.stack, a.flavor, out, a.base, a.force, a.cache, a.compression)
        else:
            pull(a.registry, a.stack, a.flavor, out, a.force, a.compression)
        link_default(out)
    except (SifError, images.ImageError, subprocess.CalledProcessError) as exc:
        print(f"sif: error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
