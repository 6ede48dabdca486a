"""Publish the images: build (tools/images.py, as `make image` does), check the self-test passed, push every tag.

    python -m tools.publish --registry ghcr.io/OWNER [--stack current] [--flavor cpu,cuda] [--dry-run]
    python -m tools.publish --registry 127.0.0.1:5000 --image hvdbench:current-cpu --stack current --flavor cpu
    make publish REGISTRY=ghcr.io/OWNER STACK=current FLAVOR=cuda      (the release workflow runs exactly this)

Each stack x flavour is pushed as REGISTRY/hvdbench:<stack>-<flavor>-<version>, :<stack>-<flavor>, and :latest for
the one images.tags() names latest (current-cuda). Like every build, it stamps the commit
(org.opencontainers.image.revision, and HVDBENCH_IMAGE_REVISION, which every result records) and the source URL
after the self-test (images.stamp), so a new commit never reruns the self-test. Nothing is pushed unless every check
passes first: each reference is well formed, the registry answers, and the image holds the marker its build's
self-test writes (SELF_TEST_MARKER) saying the whole self-test ran (a build with fewer --self-test-modes is
refused). --dry-run prints what each flavour would use (Dockerfile, build args, tags, labels) and builds and pushes
nothing. --image pushes an image already built (no build); the same checks apply. Each push prints its time and the
digest the registry gave; pin that digest (REGISTRY/hvdbench@sha256:...) to compare clusters on the very same image.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tools import images
from tools.images import FLAVORS, ROOT, ImageError

SELF_TEST_MARKER = "/opt/hvdbench/self-test"
REPOSITORY = "hvdbench"
# The reference grammar of the distribution registry (github.com/distribution/reference): a host (with a dot or a
# port, or localhost) and lowercase path components; a tag of at most 128 word characters, dots and dashes.
_HOST_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
HOST = re.compile(rf"(?:{_HOST_PART}(?:\.{_HOST_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?")
PATH_PART = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def check_registry(registry: str) -> str:
    """``registry`` without a trailing slash, or an ImageError saying what a registry reference looks like."""
    registry = registry.rstrip("/")
    host, _, path = registry.partition("/")
    named_host = "." in host or ":" in host or host == "localhost"
    if not (named_host and HOST.fullmatch(host) and all(PATH_PART.fullmatch(p) for p in path.split("/") if path)):
        raise ImageError(f"REGISTRY {registry!r} is not a registry reference: HOST[:PORT][/path] with a host that "
                         "has a dot or a port (or is localhost) and a lowercase path, e.g. ghcr.io/owner or "
                         "127.0.0.1:5000")
    return registry


def remote_tags(registry: str, stack: str, flavor: str) -> list[str]:
    """Every reference a stack x flavour is pushed as: the version's tag first, then images.tags()'s names."""
    from bench import __version__

    repo = f"{check_registry(registry)}/{REPOSITORY}"
    names = [f"{stack}-{flavor}-{__version__}", *(t.split(":", 1)[1] for t in images.tags(stack, flavor))]
    for name in names:
        if not TAG.fullmatch(name):
            raise ImageError(f"{repo}:{name} is not a valid tag (at most 128 letters, digits, '_', '.', '-')")
    return [f"{repo}:{name}" for name in names]


def check_release_tag() -> None:
    """In a release workflow (a v* tag pushed), the tag must be this package's version: the images are tagged
    with bench.__version__, and a release named otherwise would publish them under the wrong version."""
    from bench import __version__

    ref = os.environ.get("GITHUB_REF", "")
    if ref.startswith("refs/tags/v") and ref != f"refs/tags/v{__version__}":
        raise ImageError(f"the release tag {ref.removeprefix('refs/tags/')} is not v{__version__}, the version in "
                         "bench/__init__.py: set one to the other; nothing pushed")


def plan(registry: str, stack: str, flavor: str, base: str | None = None,
         extra_args: dict[str, str] | None = None) -> dict:
    """What publishing one stack x flavour builds and pushes (the dry run prints it)."""
    stamp = {**images.stamp(), **(extra_args or {})}
    dockerfile, args = images.recipe(stack, flavor, base, stamp)
    return {"stack": stack, "flavor": flavor, "dockerfile": str(dockerfile.relative_to(ROOT)), "build_args": args,
            "image": images.tags(stack, flavor)[0], "push": remote_tags(registry, stack, flavor),
            "labels": {"org.opencontainers.image.version": args["HVDBENCH_VERSION"],
                       "org.opencontainers.image.revision": args["HVDBENCH_REVISION"],
                       "org.opencontainers.image.source": args["HVDBENCH_SOURCE"],
                       "io.hvdbench.stack": stack, "io.hvdbench.flavor": flavor}}


def check_reachable(registry: str, timeout: float = 5) -> None:
    """The registry's API answers (any HTTP status: 401 means it wants a login, which docker has or not)."""
    host = registry.split("/")[0]
    reasons = []
    for scheme in ("https", "http"):
        try:
            urllib.request.urlopen(f"{scheme}://{host}/v2/", timeout=timeout)
            return
        except urllib.error.HTTPError:
            return
        except (urllib.error.URLError, OSError) as exc:
            reasons.append(f"{scheme}: {getattr(exc, 'reason', exc)}")
    raise ImageError(f"registry {host} does not answer ({'; '.join(reasons)}); nothing pushed")


def check_self_test(image: str) -> str:
    """The image's self-test marker (its text), or an ImageError: no marker, or a partial self-test."""
    import docker

    try:
        images.client().images.get(image)
    except docker.errors.ImageNotFound:
        raise ImageError(f"no image {image} here: build it first (make image)") from None
    try:
        marker = images.image_file(image, SELF_TEST_MARKER).decode()
    except docker.errors.NotFound:
        raise ImageError(f"{image} has not passed its self-test (no {SELF_TEST_MARKER}): build it with "
                         "tools/images.py; nothing pushed") from None
    fields = dict(line.split(": ", 1) for line in marker.splitlines() if ": " in line)
    if fields.get("complete") != "yes":
        raise ImageError(f"{image} ran only part of its self-test (modes: {fields.get('modes', '?')}): build it "
                         "with every mode to publish it; nothing pushed")
    return marker


def push(image: str, refs: list[str]) -> list[dict]:
    """Tag ``image`` as each reference and push it; [{reference, digest, seconds}]. Every check runs first."""
    registries = {ref.rsplit(":", 1)[0].rsplit("/", 1)[0] for ref in refs}
    check_self_test(image)
    for registry in registries:
        check_reachable(registry)
    c = images.client()
    local = c.images.get(image)
    pushed = []
    for ref in refs:
        repo, tag = ref.rsplit(":", 1)
        local.tag(repo, tag)
        start = time.perf_counter()
        digest = None
        for line in c.api.push(repo, tag=tag, stream=True, decode=True):
            if "error" in line:
                raise ImageError(f"pushing {ref} failed: {line['error'].strip().splitlines()[0]}")
            digest = (line.get("aux") or {}).get("Digest", digest)
        if not digest:
            raise ImageError(f"pushing {ref}: the registry gave no digest")
        pushed.append({"reference": ref, "digest": digest, "seconds": round(time.perf_counter() - start, 2)})
        print(f"publish: pushed {ref}  {digest}  {pushed[-1]['seconds']:.1f} s", flush=True)
    return pushed


def publish(registry: str, stacks: list[str], flavors: list[str], dry_run: bool = False,
            base: str | None = None, image: str | None = None) -> list[dict]:
    # Every reference is checked before anything is built.
    plans = [plan(registry, s, f, base) for s in stacks for f in flavors]
    if dry_run:
        for p in plans:
            print(json.dumps(p, indent=2))
        return plans
    check_release_tag()
    if image is not None:
        check_self_test(image)
    for registry_host in {p["push"][0].split("/")[0] for p in plans}:
        check_reachable(registry_host)
    done = []
    for p in plans:
        if image is None:
            extra = {k: p["build_args"][k] for k in ("HVDBENCH_REVISION", "HVDBENCH_SOURCE")}
            images.build(p["stack"], p["flavor"], base, extra)
        pushed = push(image or p["image"], p["push"])
        done.append({**p, "pushed": pushed})
        digest = pushed[0]["digest"]
        print(f"publish: {p['stack']}-{p['flavor']} is {p['push'][0].rsplit(':', 1)[0]}@{digest} "
              f"(tags: {', '.join(r.rsplit(':', 1)[1] for r in p['push'])})", flush=True)
    return done


def choices(value: str, known: list[str] | tuple[str, ...], what: str) -> list[str]:
    """A comma-separated list of stacks or flavours, or 'all'."""
    picked = list(known) if value == "all" else [v for v in value.split(",") if v]
    unknown = [v for v in picked if v not in known]
    if unknown or not picked:
        raise ImageError(f"unknown {what} {','.join(unknown) or repr(value)} (choose from: {', '.join(known)}, all)")
    return picked


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--registry", required=True, help="HOST[:PORT][/path], e.g. ghcr.io/owner or 127.0.0.1:5000")
    p.add_argument("--stack", default="current", help="a stack, a comma-separated list, or all")
    p.add_argument("--flavor", default="cuda", help="cpu, cuda, cpu,cuda or all")
    p.add_argument("--base", help="base image instead of the stack's (as images.py build --base)")
    p.add_argument("--image", help="push this image, already built, instead of building (one stack and flavour)")
    p.add_argument("--dry-run", action="store_true", help="print what each would use; build and push nothing")
    p.add_argument("--json", type=Path, help="also write what was pushed (references, digests, times) here")
    a = p.parse_args()
    try:
        stacks = choices(a.stack, images.stacks(), "stack")
        flavors = choices(a.flavor, FLAVORS, "flavor")
        if a.image and len(stacks) * len(flavors) != 1:
            raise ImageError("--image pushes one image: name one --stack and one --flavor")
        done = publish(a.registry, stacks, flavors, a.dry_run, a.base, a.image)
        if a.json and not a.dry_run:
            a.json.parent.mkdir(parents=True, exist_ok=True)
            a.json.write_text(json.dumps(done, indent=2) + "\n")
    except (ImageError, subprocess.CalledProcessError) as exc:
        print(f"publish: error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
