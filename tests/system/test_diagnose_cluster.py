"""bench diagnose on the cluster of containers made 4 nodes of 0.4 of a core each (`make cluster-up CLUSTER_NODES=4
CLUSTER_CPUS=0.4`), healthy and then broken on purpose: one node's CPU quota cut, every node's cut alike, one
node's link capped (tc tbf), a host that does not exist. Each diagnose runs as users run it, `salloc -N4 bench
diagnose` on the controller (or --hosts over ssh), and its record is read back from the shared folder.

Its own tier (make test-diagnose): keyed by what diagnose runs (tools/tier_cache.py), not by all of bench.
"""

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from tools import cluster

pytestmark = pytest.mark.diagnose

# Half a core each would leave nothing for the controller; a rank keeps one thread (two threads per rank on
# shared cores spin and went 2x apart between nodes given the same CPU time, docs/diagnose.md).
NODES, CPUS, SLOW_CPUS = 4, 0.4, 0.2
# The pipeline's node gets a quarter of its peers' CPU, not half: its loader alone read 0.45x its peers' on an idle
# host (255 against 531-620 img/s), but 0.74x (318 against 416-446) beside other work on the host's 2 cores, which
# takes CPU time from the peers' 0.4 while the slowed node still gets its 0.2: inside the rule's 0.65, and the test
# failed. At a quarter the margin holds under that load too.
PIPELINE_SLOW_CPUS = 0.1
RUN = "--model resnet50 --image-size 32 --batch-size 8 --num-classes 10"
# Seven timed samples per pair and size, not the default three: a pair's latency on nodes of 0.4 of a core swings
# 448-1878 us between healthy runs, and a median of three once came out at 448 us in the baseline (the other pairs
# 1118-1717 us), so the next healthy run's 1381 us was over the rule's 3 x baseline (gate of 2026-12-03).
SAMPLES = "7"
LINK_CAP = "200mbit"


def container(node: str) -> str:
    return cluster.compose("ps", "-q", node, capture_output=True, text=True).stdout.strip()


def set_cpus(nodes, cpus: float) -> None:
    subprocess.run(["docker", "update", "--cpus", str(cpus), *map(container, nodes)], check=True,
                   capture_output=True)


def cap_link(node: str, rate: str | None) -> None:
    cmd = (f"tc qdisc replace dev eth0 root tbf rate {rate} burst 65536 latency 50ms" if rate
           else "tc qdisc del dev eth0 root 2>/dev/null || true")
    done = cluster.run_on(cmd, node, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def shared():
    try:
        cluster.up(nodes=NODES, cpus=CPUS)
    except Exception as exc:  # noqa: BLE001 - the cluster's own one-line reason
        pytest.fail(f"the 4-node cluster did not come up ({exc}); run `make cluster-up CLUSTER_NODES=4`")
    names = cluster.node_names(NODES)
    yield cluster.shared_dir()
    set_cpus(names, CPUS)
    for node in names:
        cap_link(node, None)


def diagnose(shared: Path, *args: str, how: str = "salloc -N4") -> tuple[subprocess.CompletedProcess, dict]:
    name = f"diagnose-{uuid.uuid4().hex[:8]}"
    r = cluster.run_on(f"OMP_NUM_THREADS=1 {how} bench diagnose --run-args '{RUN}' --large-bytes 16M "
                       f"--samples {SAMPLES} --output {name} {' '.join(args)}", capture_output=True, text=True,
                       errors="replace", timeout=900)
    print(r.stdout[-4000:], r.stderr[-2000:])
    found = list((shared / name).glob("diagnose-*/diagnose.json"))
    assert len(found) == 1, (r.stdout + r.stderr)[-3000:]
    return r, json.loads(found[0].read_text())


def where(record: dict, kind: str | None = None) -> list[str]:
    return sorted(f["where"] for f in record["findings"] if kind is None or f["kind"] == kind)


@pytest.fixture(scope="module")
def healthy(shared):
    """Two diagnoses of the healthy cluster, the first saving the baseline the others are held against."""
    baseline = f"/shared/baseline-{uuid.uuid4().hex[:8]}.json"
    first = diagnose(shared, "--save-baseline", baseline)
    second = diagnose(shared, "--baseline", baseline)
    return first, second, baseline


def test_a_healthy_cluster_passes_twice(healthy):
    for r, record in healthy[:2]:
        assert r.returncode == 0 and record["passed"] and record["findings"] == [], record["findings"]
        assert sorted(record["figures"]["device"]) == ["node1", "node2", "node3", "node4"]
        assert len(record["figures"]["pair"]) == 6 and len(record["figures"]["rank"]) == 4
        assert set(record["phases"]) == {"devices", "network", "job"}
        assert "diagnose PASS" in r.stdout
    assert (Path(cluster.shared_dir()) / Path(healthy[2]).name).exists()
    assert healthy[1][1]["baseline"] == healthy[2]


def test_a_slow_node_is_named_in_the_devices_and_as_the_straggler(shared, healthy):
    labels = f"labels-{uuid.uuid4().hex[:8]}"
    set_cpus(["node3"], SLOW_CPUS)
    try:
        r, record = diagnose(shared, "--phases", "devices,job", "--baseline", healthy[2], "--node-patch",
                             f"/shared/{labels}")
    finally:
        set_cpus(["node3"], CPUS)
    # each node's verdict as Kubernetes labels; the taint's command for the rejected one only (docs/soak.md)
    verdicts = {p.name: json.loads(p.read_text())["metadata"]["labels"]["hvdbench.io/diagnose"]
                for p in (shared / labels).glob("*.json")}
    accepted = {a["node"]: a["accepted"] for a in record["accept"]}
    assert verdicts["node3-diagnose.json"] == "error" and not accepted["node3"], (verdicts, accepted)
    assert all(verdicts[f"{n}-diagnose.json"] != "error" for n in ("node1", "node2", "node4")), verdicts
    assert "kubectl taint node node3 hvdbench.io/diagnose=error:NoSchedule --overwrite" in r.stdout
    assert r.returncode == 3 and not record["passed"]
    assert set(where(record, "device")) == {"node3"}
    rules = {f["rule"].split(":")[0] for f in record["findings"] if f["kind"] == "device"}
    assert rules == {"device-slower-than-peers", "device-slower-than-baseline"}
    assert [w for w in where(record, "rank")] == [w for w in where(record, "rank") if "(node3)" in w] != []
    assert record["phases"]["job"]["straggler"]["host"] == "node3"
    assert all("node3" in f["where"] or f["kind"] == "job" for f in record["findings"]), record["findings"]
    assert "diagnose FAIL" in r.stdout and "node3" in r.stdout


def test_a_node_whose_input_pipeline_is_slow_is_named_with_data(shared):
    """--data: the devices train from a dataset on the shared folder; node3's CPU quota cut to a quarter slows its
    pipeline, which its loader rate (the pipeline alone) shows against its peers'."""
    data = f"/shared/jpegs-{uuid.uuid4().hex[:8]}"
    made = cluster.run_on(f"bench data make {data} --images 120 --classes 4 --image-size 64", capture_output=True,
                          text=True)
    assert made.returncode == 0, made.stderr
    set_cpus(["node3"], PIPELINE_SLOW_CPUS)
    try:
        r, record = diagnose(shared, "--phases", "devices", "--data", data)
    finally:
        set_cpus(["node3"], CPUS)
    rates = {node: f["loader_rate"] for node, f in record["figures"]["device"].items()}
    assert sorted(rates) == ["node1", "node2", "node3", "node4"] and all(v > 0 for v in rates.values()), rates
    piped = [f["where"] for f in record["findings"] if f["rule"].startswith("pipeline-slower-than-peers")]
    assert piped == ["node3"], (rates, record["findings"])
    assert r.returncode == 3


def test_every_node_slowed_alike_is_found_against_the_baseline_only(shared, healthy):
    names = cluster.node_names(NODES)
    set_cpus(names, SLOW_CPUS)
    try:
        r, record = diagnose(shared, "--phases", "devices", "--baseline", healthy[2])
    finally:
        set_cpus(names, CPUS)
    assert r.returncode == 3
    assert where(record) == ["node1", "node2", "node3", "node4"]
    assert {f["against"] for f in record["findings"]} == {"baseline"}


def test_a_capped_link_is_named_by_its_pairs(shared):
    cap_link("node2", LINK_CAP)
    try:
        r, record = diagnose(shared, "--phases", "devices,network")
    finally:
        cap_link("node2", None)
    assert r.returncode == 3
    assert set(where(record, "pair")) == {"node1+node2", "node2+node3", "node2+node4"}
    (node,) = [f for f in record["findings"] if f["kind"] == "node"]
    assert node["where"] == "node2" and node["rule"].startswith("common-member-of-pairs")
    assert where(record, "device") == []


def test_a_host_that_cannot_be_reached_is_a_finding_and_the_others_go_on(shared):
    """Without Slurm: ssh to each node, mpirun -H for the job; node9 does not exist."""
    r, record = diagnose(shared, "--hosts", "node1,node2,node3,node9", "--phases", "devices,job", how="")
    assert r.returncode == 3 and record["executor"] == "hosts"
    # the unreachable host is the one that did not run (on 0.4 of a shared core, under the CFS quota, a reachable
    # node's device run or a rank's compute may also stray past its peers' rule now and then: seen once each in
    # fresh-clone runs; that finding is noise here, not what this test is about, and it never names node9)
    (f,) = [f for f in record["findings"] if f["rule"].startswith("did-not-run")]
    assert f["where"] == "node9" and f["kind"] == "device" and f["figure"] is None
    noise = [g for g in record["findings"] if g is not f]
    assert all(g["against"] == "peers" and "node9" not in g["where"] for g in noise), noise
    assert sorted(record["figures"]["device"]) == ["node1", "node2", "node3"]
    assert record["left_out"] == ["node9"]
    assert sorted(record["figures"]["rank"]) == ["rank 0 (node1)", "rank 1 (node2)", "rank 2 (node3)"]
    assert record["phases"]["job"]["steps"][0]["command"][0] == "mpirun"


def test_an_allocation_ended_mid_diagnose_leaves_no_verdict_and_no_process(shared):
    """salloc stopped (as by a time limit) after the devices phase: no record, one line, nothing left running."""
    name = f"diagnose-{uuid.uuid4().hex[:8]}"
    r = cluster.run_on(f"OMP_NUM_THREADS=1 timeout -s TERM 25 salloc -N4 bench diagnose --run-args '{RUN}' "
                       f"--output {name}", capture_output=True, text=True, errors="replace", timeout=300)
    print(r.stdout[-2000:], r.stderr[-2000:])
    assert r.returncode != 0
    assert list((shared / name).glob("diagnose-*/diagnose.json")) == []
    out = r.stdout + r.stderr  # compose exec -T passes the remote stderr on as its stdout
    assert "error: the Slurm allocation" in out and "ended" in out and "Traceback" not in out
    for node in cluster.node_names(NODES):
        left = cluster.run_on("pgrep -af 'pytho[n][^ ]* -m bench' || true", node, capture_output=True, text=True)
        assert left.stdout.strip() == "", (node, left.stdout)
