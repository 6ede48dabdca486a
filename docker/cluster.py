"""The containerised Slurm cluster (docker/cluster/): a controller and two compute nodes on one host.

    python docker/cluster.py up            # build the node image (on hvdbench:current-cpu-frameworks), start, wait
    python docker/cluster.py exec -- CMD   # run CMD (a shell line) on the controller, in /shared
    python docker/cluster.py down          # stop and remove the containers, network and keys volume

The host's results/cluster is /shared in every container (HVDBENCH_CLUSTER_SHARED changes it). Compose
runs through the docker-compose CLI (project "hvdbench-cluster"); the image builds with BuildKit like the
others (docker/images.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import images  # noqa: E402

ROOT = images.ROOT
CLUSTER = ROOT / "docker" / "cluster"
COMPOSE = CLUSTER / "compose.yaml"
APPTAINER = CLUSTER / "apptainer.yaml"  # Apptainer inside the nodes (up --apptainer)
PROJECT = "hvdbench-cluster"
IMAGE = "hvdbench-cluster:current-cpu"
NODES = ("node1", "node2")
APPTAINER_DIR = Path(os.environ.get("HVDBENCH_APPTAINER_DIR", "/var/cache/hvdbench/apptainer"))
APPTAINER_PATH = f"{APPTAINER_DIR}/bin"  # the wrapper apptainer and singularity, for PATH inside the nodes


def shared_dir() -> Path:
    return Path(os.environ.get("HVDBENCH_CLUSTER_SHARED", ROOT / "results" / "cluster")).resolve()


def apptainer_caps() -> Path:
    """A compose file that gives every node the capabilities Apptainer's set-up grants root (its
    capability.json, made by scripts/apptainer-up.sh from the host's bounding set: the starter asks for
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


def compose_cmd(apptainer: bool = False) -> list[str]:
    files = [COMPOSE, APPTAINER, apptainer_caps()] if apptainer else [COMPOSE]
    return ["docker-compose", "-p", PROJECT, *(arg for f in files for arg in ("-f", str(f)))]


def compose_env() -> dict[str, str]:
    return dict(os.environ, HVDBENCH_CLUSTER_SHARED=str(shared_dir()), HVDBENCH_CLUSTER_IMAGE=IMAGE)


def compose(*args: str, check: bool = True, apptainer: bool = False, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*compose_cmd(apptainer), *args], check=check, env=compose_env(), **kw)


BASE = images.frameworks_tag("current", "cpu")


def build(base: str = BASE) -> str:
    """The node image, on the CPU image's frameworks stage (built by `images.py build --flavor cpu`)."""
    version = images.build_args("current", "cpu")["HVDBENCH_VERSION"]
    cmd = [images.docker_cli(), "build", "--network", "host", "-f", str(CLUSTER / "Dockerfile"),
           "--build-arg", f"HVDBENCH_IMAGE={base}", "--build-arg", f"HVDBENCH_VERSION={version}", "-t", IMAGE,
           str(ROOT)]
    print("cluster:", " ".join(cmd), flush=True)
    if subprocess.run(cmd, env=dict(os.environ, DOCKER_BUILDKIT="1")).returncode != 0:
        raise images.ImageError(f"docker build of {IMAGE} failed")
    return IMAGE


def idle_nodes() -> list[str]:
    done = compose("exec", "-T", "head", "sinfo", "-h", "-N", "-o", "%N %t", check=False,
                   capture_output=True, text=True)
    return sorted(line.split()[0] for line in done.stdout.splitlines() if line.split()[1:] == ["idle"])


def up(timeout: float = 120, apptainer: bool = False) -> float:
    """Start the cluster (reusing running containers made the same way; with ``apptainer``, nodes that run
    the host's Apptainer on its SIFs: docker/cluster/apptainer.yaml) and wait until every compute node is
    idle; the seconds that took."""
    start = time.monotonic()
    shared_dir().mkdir(parents=True, exist_ok=True)
    compose("up", "-d", apptainer=apptainer)
    while time.monotonic() - start < timeout:
        if idle_nodes() == sorted(NODES):
            took = time.monotonic() - start
            print(f"cluster: up, {' '.join(NODES)} idle after {took:.1f} s; shared directory {shared_dir()}")
            return took
        time.sleep(1)
    logs = compose("logs", "--tail", "20", check=False, capture_output=True, text=True).stdout
    raise images.ImageError(f"the nodes were not idle after {timeout:.0f} s:\n{logs}")


def down() -> None:
    compose("down", "-v", "--remove-orphans")


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
    sub.add_parser("down", help="stop and remove the cluster")
    e = sub.add_parser("exec", help="run a shell command line on a node (default the controller) in /shared")
    e.add_argument("--node", default="head", choices=("head", *NODES))
    e.add_argument("cmd", nargs=argparse.REMAINDER)
    a = p.parse_args()
    try:
        if a.command == "build":
            build(a.base)
        elif a.command == "up":
            build(a.base)
            up(a.timeout, a.apptainer)
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
    except FileNotFoundError as exc:  # no docker-compose or docker CLI
        print(f"cluster: error: {exc.filename} is not installed; run scripts/docker-up.sh", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
