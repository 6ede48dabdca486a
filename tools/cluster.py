"""The containerised Slurm cluster (docker/cluster/): a controller and two compute nodes on one host.

    python -m tools.cluster up            # build the node image (on hvdbench:current-cpu-frameworks), start, wait
    python -m tools.cluster up --nodes 4 --cpus 0.5   # four compute nodes, each held to half a core
    python -m tools.cluster exec -- CMD   # run CMD (a shell line) on the controller, in /shared
    python -m tools.cluster down          # stop and remove the containers, network and keys volume

HVDBENCH_CLUSTER_BENCH=DIR (the system tiers: the checkout's bench/) binds DIR over the package in every node,
read-only, and keeps a node image whose other inputs did not change since it was built (a change to bench/
alone builds nothing; tools/images.py, --cache frameworks).

The host's results/cluster is /shared in every container (HVDBENCH_CLUSTER_SHARED changes it). Compose
runs through compose's CLI, v1's docker-compose or else the `docker compose` plugin (project "hvdbench-cluster");
the image builds with BuildKit like the others (tools/images.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools import images

ROOT = images.ROOT
CLUSTER = ROOT / "docker" / "cluster"
COMPOSE = CLUSTER / "compose.yaml"
APPTAINER = CLUSTER / "apptainer.yaml"  # Apptainer inside the nodes (up --apptainer)
PROJECT = "hvdbench-cluster"
IMAGE = "hvdbench-cluster:current-cpu"
NODES = ("node1", "node2")  # the default cluster's compute nodes
# Another size or CPU quota (up --nodes N --cpus C) is kept here until the next up or down: the compose file
# and slurm.conf made from it are added to every compose command, so exec and down see the same cluster.
SHAPE = Path(tempfile.gettempdir()) / f"{PROJECT}-shape.json"
APPTAINER_DIR = Path(os.environ.get("HVDBENCH_APPTAINER_DIR", "/var/cache/hvdbench/apptainer"))
APPTAINER_PATH = f"{APPTAINER_DIR}/bin"  # the wrapper apptainer and singularity, for PATH inside the nodes


def shared_dir() -> Path:
    return Path(os.environ.get("HVDBENCH_CLUSTER_SHARED", ROOT / "results" / "cluster")).resolve()


def apptainer_caps() -> Path:
    """A compose file that gives every node the capabilities Apptainer's set-up grants root (its
    capability.json, made by tools/apptainer-up.sh from the host's bounding set: the starter asks for
    exactly those and aborts on one it cannot get) and the host's loop devices."""
    granted = APPTAINER_DIR / "sid" / "etc" / "apptainer" / "capability.json"
    try:
        caps = json.loads(granted.read_text())["users"]["root"]
    except (OSError, ValueError, KeyError) as exc:
        raise images.ImageError(f"cannot read {granted} ({exc}): run `make apptainer-up` first") from None
    names = ", ".join(c.removeprefix("CAP_") for c in caps)
    # The host's loop devices, passed in: Apptainer opens /dev/loopN for the index the kernel offers and,
    # in a fresh container, found no such file (without them, all 3 runs in 2 freshly made clusters failed).
    loops = ", ".join(["/dev/loop-control", *sorted((str(d) for d in Path("/dev").glob("loop[0-9]*")),
                                                    key=lambda d: int(d.removeprefix("/dev/loop")))])
    path = Path(tempfile.gettempdir()) / f"{PROJECT}-apptainer-caps.yaml"
    path.write_text(f"# from {granted} and /dev\nservices:\n" + "".join(
        f"  {n}:\n    cap_add: [{names}]\n    devices: [{loops}]\n" for n in ("head", *NODES)))
    return path


def node_names(count: int) -> tuple[str, ...]:
    return tuple(f"node{i}" for i in range(1, count + 1))


def shape() -> tuple[tuple[str, ...], float | None]:
    """The running cluster's compute nodes and CPU quota per node (None: no quota)."""
    try:
        data = json.loads(SHAPE.read_text())
        return node_names(int(data["nodes"])), data["cpus"]
    except (OSError, ValueError, KeyError):
        return NODES, None


def write_if_changed(path: Path, text: str) -> Path:
    """``path`` holding ``text``, rewritten only when it holds something else. Every compose command (an exec, a
    wait for the nodes) makes these files again; a rewrite empties the file for an instant, and a node starting
    then read an empty slurm.conf (bind-mounted from this file) and died: the cluster never came up."""
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def shape_file(nodes: tuple[str, ...], cpus: float | None) -> Path:
    """A compose file for a cluster of ``nodes`` (each held to ``cpus`` cores): slurm.conf with those nodes
    for every container, the nodes past node2 declared as node1 is, and the quota on each."""
    conf = Path(tempfile.gettempdir()) / f"{PROJECT}-slurm.conf"
    text = (CLUSTER / "slurm.conf").read_text()
    write_if_changed(conf, text.replace("NodeName=node[1-2]", f"NodeName=node[1-{len(nodes)}]"))
    base = {"image": "${HVDBENCH_CLUSTER_IMAGE:-hvdbench-cluster:current-cpu}", "init": True,
            "cap_add": ["NET_ADMIN"], "working_dir": "/shared", "networks": ["cluster"],
            "command": ["compute"], "depends_on": ["head"],
            "volumes": ["keys:/etc/cluster-keys", f"{shared_dir()}:/shared",
                        f"{ROOT / 'singularity' / 'slurm'}:/opt/hvdbench/slurm:ro"]}
    services: dict[str, dict] = {"head": {"volumes": [f"{conf}:/etc/slurm/slurm.conf:ro"]}}
    for node in nodes:
        extra = {} if node in NODES else {**base, "hostname": node}
        services[node] = {**extra, "volumes": [*extra.get("volumes", []), f"{conf}:/etc/slurm/slurm.conf:ro"],
                          **({"cpus": cpus} if cpus else {})}
    path = Path(tempfile.gettempdir()) / f"{PROJECT}-shape.yaml"
    return write_if_changed(path, f"# from {SHAPE}: {len(nodes)} compute nodes, cpus {cpus}\n"
                            + json.dumps({"services": services}, indent=2) + "\n")  # JSON is YAML


def bound_bench() -> Path | None:
    """The bench/ bound over the nodes' own (HVDBENCH_CLUSTER_BENCH), or None."""
    value = os.environ.get("HVDBENCH_CLUSTER_BENCH")
    if not value:
        return None
    path = Path(value).resolve()
    if not (path / "__init__.py").is_file():
        raise images.ImageError(f"HVDBENCH_CLUSTER_BENCH={value} is not a bench package directory")
    return path


def bench_file(nodes: tuple[str, ...], bench: Path) -> Path:
    """A compose file that binds ``bench`` over the node image's package in the controller and every node."""
    binds = "".join(f"      - {bind}\n" for bind in images.bench_binds(IMAGE, bench))
    path = Path(tempfile.gettempdir()) / f"{PROJECT}-bench.yaml"
    return write_if_changed(path, f"# HVDBENCH_CLUSTER_BENCH={bench}\nservices:\n" + "".join(
        f"  {n}:\n    volumes:\n{binds}" for n in ("head", *nodes)))


def compose_cmd(apptainer: bool = False) -> list[str]:
    files = [COMPOSE, APPTAINER, apptainer_caps()] if apptainer else [COMPOSE]
    nodes, cpus = shape()
    if nodes != NODES or cpus:
        files.append(shape_file(nodes, cpus))
    bench = bound_bench()
    if bench is not None:
        files.append(bench_file(nodes, bench))
    return [*compose_cli(), "-p", PROJECT, *(arg for f in files for arg in ("-f", str(f)))]


def compose_cli() -> list[str]:
    """Compose v1's docker-compose where installed, else the Docker CLI's compose plugin (Docker CE's)."""
    return ["docker-compose"] if shutil.which("docker-compose") else ["docker", "compose"]


def compose_env() -> dict[str, str]:
    return dict(os.environ, HVDBENCH_CLUSTER_SHARED=str(shared_dir()), HVDBENCH_CLUSTER_IMAGE=IMAGE)


def compose(*args: str, check: bool = True, apptainer: bool = False, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*compose_cmd(apptainer), *args], check=check, env=compose_env(), **kw)


BASE = images.frameworks_tag("current", "cpu")


def build(base: str = BASE) -> str:
    """The node image, on the CPU image's frameworks stage (built by `images.py build --flavor cpu`); kept where
    HVDBENCH_CLUSTER_BENCH binds bench/ and nothing but bench/ changed since it was built."""
    args = {"HVDBENCH_IMAGE": base, "HVDBENCH_VERSION": images.build_args("current", "cpu")["HVDBENCH_VERSION"]}
    key = None
    if bound_bench() is not None:
        key = images.package_key(base, [CLUSTER / "Dockerfile", CLUSTER / "node.sh", ROOT / "pyproject.toml"], args)
        if images.kept(IMAGE, key):
            print(f"cluster: {IMAGE} kept: only this package changed since it was built, and "
                  "HVDBENCH_CLUSTER_BENCH binds it", flush=True)
            return IMAGE
    cmd = [images.docker_cli(), "build", "--network", "host", "-f", str(CLUSTER / "Dockerfile"),
           *(arg for name, value in args.items() for arg in ("--build-arg", f"{name}={value}")), "-t", IMAGE,
           str(ROOT)]
    print("cluster:", " ".join(cmd), flush=True)
    if subprocess.run(cmd, env=dict(os.environ, DOCKER_BUILDKIT="1")).returncode != 0:
        raise images.ImageError(f"docker build of {IMAGE} failed")
    if key is not None:
        images.remember(IMAGE, key)
    return IMAGE


def idle_nodes() -> list[str]:
    done = compose("exec", "-T", "head", "sinfo", "-h", "-N", "-o", "%N %t", check=False,
                   capture_output=True, text=True)
    return sorted(line.split()[0] for line in done.stdout.splitlines() if line.split()[1:] == ["idle"])


def up(timeout: float = 120, apptainer: bool = False, nodes: int = len(NODES), cpus: float | None = None) -> float:
    """Start the cluster (reusing running containers made the same way; with ``apptainer``, nodes that run
    the host's Apptainer on its SIFs: docker/cluster/apptainer.yaml; ``nodes`` compute nodes, each held to
    ``cpus`` cores when given) and wait until every compute node is idle; the seconds that took."""
    if nodes < 2 or (cpus is not None and cpus <= 0):
        raise images.ImageError("--nodes must be at least 2 and --cpus above 0")
    if apptainer and nodes != len(NODES):
        raise images.ImageError("--apptainer makes the 2-node cluster only (docker/cluster/apptainer.yaml)")
    start = time.monotonic()
    shared_dir().mkdir(parents=True, exist_ok=True)
    if nodes == len(NODES) and cpus is None:
        SHAPE.unlink(missing_ok=True)
    else:
        SHAPE.write_text(json.dumps({"nodes": nodes, "cpus": cpus}) + "\n")
    names = shape()[0]
    compose("up", "-d", "--remove-orphans", apptainer=apptainer)  # a larger cluster's extra nodes go
    while time.monotonic() - start < timeout:
        if idle_nodes() == sorted(names):
            took = time.monotonic() - start
            print(f"cluster: up, {' '.join(names)} idle after {took:.1f} s; shared directory {shared_dir()}")
            return took
        time.sleep(1)
    logs = compose("logs", "--tail", "20", check=False, capture_output=True, text=True).stdout
    raise images.ImageError(f"the nodes were not idle after {timeout:.0f} s:\n{logs}")


def down() -> None:
    compose("down", "-v", "--remove-orphans")
    SHAPE.unlink(missing_ok=True)


def run_on(command: str, node: str = "head", **kw) -> subprocess.CompletedProcess:
    """A shell command line on a node (default the controller), in /shared, with the image's environment."""
    return compose("exec", "-T", "-w", "/shared", node, "bash", "-c", command, check=False, **kw)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the node image")
    b.add_argument("--base", default=BASE)
    u = sub.add_parser("up", help="build the node image, start the cluster, wait until the nodes are idle")
    u.add_argument("--base", default=BASE)
    u.add_argument("--timeout", type=float, default=120)
    u.add_argument("--apptainer", action="store_true",
                   help="nodes that run the host's Apptainer on its SIFs (docker/cluster/apptainer.yaml)")
    u.add_argument("--nodes", type=int, default=len(NODES), help="compute nodes (default 2)")
    u.add_argument("--cpus", type=float, default=None,
                   help="hold each compute node to this many cores (docker's --cpus; default: no quota)")
    sub.add_parser("down", help="stop and remove the cluster")
    e = sub.add_parser("exec", help="run a shell command line on a node (default the controller) in /shared")
    e.add_argument("--node", default="head", help="head (default), node1, node2, ...")
    e.add_argument("cmd", nargs=argparse.REMAINDER)
    a = p.parse_args()
    try:
        if a.command == "build":
            build(a.base)
        elif a.command == "up":
            build(a.base)
            up(a.timeout, a.apptainer, a.nodes, a.cpus)
        elif a.command == "down":
            down()
        else:
            words = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
            if not words:
                raise images.ImageError("exec needs a command, e.g. exec -- 'srun -N2 -n2 hostname'")
            sys.exit(run_on(" ".join(words), a.node).returncode)
    except (images.ImageError, subprocess.CalledProcessError) as exc:
        print(f"cluster: error: {exc}", file=sys.stderr)
        sys.exit(1)
    except FileNotFoundError as exc:  # no compose or docker CLI
        print(f"cluster: error: {exc.filename} is not installed; run tools/docker-up.sh", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
