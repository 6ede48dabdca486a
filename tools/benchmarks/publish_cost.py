"""What publishing and pulling an image costs, through a registry on this machine: a table.

    python -m tools.benchmarks.publish_cost [--image hvdbench:current-cpu] [--stack current] [--flavor cpu]
    (make bench-publish)

Each figure starts from nothing held: a registry of its own on 127.0.0.1:5055 with empty storage (so the first
push sends every layer), a second Docker engine with an empty data root for the pull (so every layer comes
down), and Apptainer with its cache disabled. The second engine runs in a network namespace of its own (a
second engine beside the first would manage the same docker0 bridge), and pulls over a veth pair from a second
registry process serving the same storage. Measured: the first push (tools/publish.py --image: the
self-test marker check, every tag), the same push again (the registry holds it all), the pull into the empty
engine, and `tools/sif.py pull` (what `make sif-pull` runs); the digest is checked at every step: the one
the push printed is the one the pulled image lists and the one the SIF's labels name.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PORT = 5055
NETNS = "hvdbpull"  # the second engine's network namespace, and its veth pair's name stem
VETH_HOST, VETH_NS = "10.213.0.1", "10.213.0.2"


def wait_for(check, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # not up yet
            pass
        time.sleep(0.5)
    raise SystemExit(f"publish benchmark: {what} did not come up in {seconds:.0f} s")


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def timed(cmd: list[str], **kw) -> tuple[float, subprocess.CompletedProcess]:
    start_s = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise SystemExit(f"publish benchmark: {' '.join(cmd[:4])} ... failed: {done.stderr.strip()[-500:]}")
    return time.perf_counter() - start_s, done


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--image", default="hvdbench:current-cpu")
    p.add_argument("--stack", default="current")
    p.add_argument("--flavor", default="cpu")
    a = p.parse_args()
    for tool in ("docker-registry", "dockerd"):
        if shutil.which(tool) is None:
            raise SystemExit(f"publish benchmark: {tool} is not installed (make registry-up; make docker-up)")
    tmp = Path(tempfile.mkdtemp(prefix="hvdbench-publish-bench-"))
    registry = f"127.0.0.1:{PORT}"
    (tmp / "registry.yml").write_text(
        f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {tmp / 'registry'}\n"
        f"http:\n  addr: {registry}\n")
    procs = [start(["docker-registry", "serve", str(tmp / "registry.yml")], tmp / "registry.log")]
    rows = []
    try:
        wait_for(lambda: urllib.request.urlopen(f"http://{registry}/v2/", timeout=2), "the registry")
        size = json.loads(subprocess.run(["docker", "image", "inspect", a.image], capture_output=True, text=True,
                                         check=True).stdout)[0]["Size"]
        push = [sys.executable, "-m", "tools.publish", "--registry", registry, "--image", a.image,
                "--stack", a.stack, "--flavor", a.flavor, "--json", str(tmp / "pushed.json")]
        seconds, _ = timed(push)
        pushed = json.loads((tmp / "pushed.json").read_text())[0]["pushed"]
        digest, ref = pushed[0]["digest"], pushed[0]["reference"]
        rows.append(("push, empty registry (every tag)", seconds, f"{len(pushed)} tags, {digest[:19]}..."))
        seconds, _ = timed(push)
        rows.append(("push again, registry holds every layer", seconds, "no layer sent"))

        # A second engine with nothing in it, in its own network namespace: every layer comes down.
        inside = f"ip netns exec {NETNS} "
        for cmd in (f"ip netns add {NETNS}", f"ip link add {NETNS}0 type veth peer name {NETNS}1",
                    f"ip link set {NETNS}1 netns {NETNS}", f"ip addr add {VETH_HOST}/30 dev {NETNS}0",
                    f"ip link set {NETNS}0 up", f"{inside}ip addr add {VETH_NS}/30 dev {NETNS}1",
                    f"{inside}ip link set {NETNS}1 up", f"{inside}ip link set lo up"):
            timed(cmd.split())
        inner = f"{VETH_HOST}:{PORT + 1}"
        (tmp / "registry-veth.yml").write_text((tmp / "registry.yml").read_text().replace(registry, inner))
        procs.append(start(["docker-registry", "serve", str(tmp / "registry-veth.yml")], tmp / "registry-veth.log"))
        sock = tmp / "docker.sock"
        # nsenter, not `ip netns exec`: that also remounts /sys, and dockerd then finds no cgroups.
        procs.append(start(["nsenter", f"--net=/run/netns/{NETNS}", "dockerd", "--data-root", str(tmp / "engine"),
                            "--exec-root", str(tmp / "exec"), "--host", f"unix://{sock}", "--pidfile",
                            str(tmp / "dockerd.pid"), "--insecure-registry", inner, "--iptables=false",
                            "--ip-masq=false"], tmp / "dockerd.log"))
        engine = ["docker", "--host", f"unix://{sock}"]
        wait_for(lambda: subprocess.run([*engine, "info"], capture_output=True).returncode == 0, "the second engine")
        inner_ref = ref.replace(registry, inner)
        seconds, _ = timed([*engine, "pull", "-q", inner_ref])
        listed = json.loads(timed([*engine, "image", "inspect", inner_ref])[1].stdout)[0]["RepoDigests"]
        same = f"{inner_ref.rsplit(':', 1)[0]}@{digest}" in listed
        rows.append(("docker pull, empty engine", seconds, "digest as pushed" if same else f"DIGEST DIFFERS {listed}"))

        sif = tmp / "pulled.sif"
        env = dict(os.environ, APPTAINER_DISABLE_CACHE="true")
        seconds, _ = timed([sys.executable, "-m", "tools.sif", "pull", "--registry", registry,
                            "--stack", a.stack, "--flavor", a.flavor, "--output", str(sif)], env=env, cwd=tmp)
        runtime = timed([sys.executable, "-m", "tools.sif", "runtime"])[1].stdout.strip()
        labels = json.loads(timed([runtime, "inspect", "--json", "--labels", str(sif)], cwd=tmp)[1].stdout)
        source = json.dumps(labels).split("deffile.from")[-1]
        rows.append(("SIF pull by digest (sif.py pull), no cache", seconds,
                     f"{sif.stat().st_size / 2**30:.2f} GiB SIF, labels name the digest: {digest in source}"))
    finally:
        for proc in reversed(procs):
            stop(proc)
        subprocess.run(["umount", "-R", str(tmp / "exec")], capture_output=True)
        subprocess.run(["ip", "netns", "del", NETNS], capture_output=True)  # takes its end of the veth pair along
        subprocess.run(["ip", "link", "del", f"{NETNS}0"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{a.image}: {size / 2**30:.2f} GiB unpacked; registry and engine on this machine (loopback)\n")
    print(f"| {'step':<44} | {'seconds':>7} | notes")
    print(f"|{'-' * 46}|{'-' * 9}|------")
    for what, seconds, note in rows:
        print(f"| {what:<44} | {seconds:7.1f} | {note}")


if __name__ == "__main__":
    main()
