"""Across nodes: the containerised Slurm cluster (docker/cluster/, `make cluster-up`): controller head,
compute nodes node1 and node2, each a container from the CPU image plus Slurm and munge, sharing
results/cluster as /shared.

The fixture starts the cluster (or reuses a running one); every run goes through the controller's srun,
one rank per node, and its result must show both hosts.
"""

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import SMALL, TF_SMALL, assert_valid_run, bench, sbatch_wait_line

pytestmark = [pytest.mark.cluster, pytest.mark.multiproc]

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docker"))
import cluster  # noqa: E402

from bench.modes import MODES  # noqa: E402


@pytest.fixture(scope="module")
def shared():
    try:
        cluster.up()
    except Exception as exc:  # noqa: BLE001 - the cluster's own one-line reason
        pytest.fail(f"the cluster did not come up ({exc}); run `make cluster-up`")
    return cluster.shared_dir()


def on_head(command: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return cluster.run_on(command, capture_output=True, text=True, errors="replace", timeout=timeout)


def results_of(shared: Path, name: str) -> dict:
    files = sorted((shared / name).glob("*.json"))
    assert len(files) == 1, files
    from bench.results import load_result

    return load_result(files[0])


# torch-ddp and tf-horovod cross the nodes through their batch scripts' srun (test_sbatch_scripts_across_two_nodes).
@pytest.mark.parametrize("mode, mpi", [("torch-horovod", "--mpi=pmix"), ("tf-native", "")])
def test_srun_one_rank_per_node(shared, mode, mpi):
    """tf-native is multiworker here: TensorFlow's SlurmClusterResolver finds the two nodes."""
    name = f"{mode}-{uuid.uuid4().hex[:8]}"
    args = " ".join(TF_SMALL if mode.startswith("tf") else SMALL)
    r = on_head(f"srun -N2 -n2 --ntasks-per-node=1 {mpi} bench {mode} {args} --output {name}")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    result = results_of(shared, name)
    assert_valid_run(result, mode, 2, "srun")
    ranks = result["environment"]["ranks"]
    assert sorted(rank["host"] for rank in ranks) == ["node1", "node2"], json.dumps(ranks)
    assert [rank["local_rank"] for rank in ranks] == [0, 0]


def test_tf_native_parameter_servers_across_two_nodes(shared):
    """srun -N2 -n4 --ntasks-per-node=2: roles from SLURM_PROCID put the chief and the ps on node1 and both
    workers on node2, so every update crosses the nodes; the servers end when the chief is done."""
    name = f"ps-{uuid.uuid4().hex[:8]}"
    r = on_head(f"srun -N2 -n4 --ntasks-per-node=2 bench tf-native --strategy ps {' '.join(TF_SMALL)} "
                f"--output {name}")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    result = results_of(shared, name)
    assert result["launcher"] == "srun" and result["world_size"] == 2 and result["processes"] == 1
    tasks = result["environment"]["distribution"]["tasks"]
    assert [(t["job"], t["host"]) for t in tasks] == [("chief", "node1"), ("ps", "node1"), ("worker", "node2"),
                                                      ("worker", "node2")], tasks
    assert all(t["devices"] == ["CPU:0"] for t in tasks)
    (report,) = result["sync"]["reports"]
    assert report["in_sync"] and report["variables_on_ps"] and all(c > 0 for c in report["updates_per_worker"])
    assert result["sync"]["ranks_in_sync"] and result["sync"]["params_changed"]


def test_verify_across_two_nodes(shared):
    """bench verify inside `salloc -N2`: every run (the references too) is an srun step on the nodes; the
    distributed ones put a rank on each node and must match the single-process reference."""
    name = f"verify-{uuid.uuid4().hex[:8]}"
    r = on_head(f"salloc -N2 --ntasks-per-node=1 bench verify --framework both --modes torch-ddp,tf-horovod "
                f"--no-cross --output {name}", timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    (path,) = (shared / name).glob("*-verify-*.json")
    report = json.loads(path.read_text())
    assert report["passed"], json.dumps(report["modes"])
    assert [(row["mode"], row["status"], row["world_size"], row["hosts"]) for row in report["modes"]] == [
        ("torch-ddp", "PASS", 2, ["node1", "node2"]), ("tf-horovod", "PASS", 2, ["node1", "node2"])]


@pytest.mark.parametrize("script, mode", [("ddp.sbatch", "torch-ddp"), ("horovod.sbatch", "tf-horovod")])
def test_sbatch_scripts_across_two_nodes(shared, script, mode):
    """The batch scripts as users submit them (singularity/slurm, mounted at /opt/hvdbench/slurm), with the
    bench installed in the node image (HVDBENCH_RUNTIME=none)."""
    name = f"sbatch-{mode}-{uuid.uuid4().hex[:8]}"
    args = " ".join(TF_SMALL if mode.startswith("tf") else SMALL)
    r = on_head(f"mkdir {name} && cd {name} && HVDBENCH_RUNTIME=none HVDBENCH_RESULTS=/shared/{name}/results "
                f"BENCH_ARGS='{args}' "
                + sbatch_wait_line(f"--nodes=2 --ntasks-per-node=1 --cpus-per-task=1 /opt/hvdbench/slurm/{script}"))
    logs = "\n".join(p.read_text() for p in (shared / name).glob("hvdbench-*.out"))
    assert r.returncode == 0, (r.stdout + r.stderr + logs)[-3000:]
    result = results_of(shared, f"{name}/results")
    assert_valid_run(result, mode, 2, "srun")
    ranks = result["environment"]["ranks"]
    assert sorted(rank["host"] for rank in ranks) == ["node1", "node2"], json.dumps(ranks)
    assert [rank["local_rank"] for rank in ranks] == [0, 0]
    if MODES[mode].needs_mpi:  # the script's srun --mpi=pmix joined the ranks across the nodes
        assert result["environment"]["distribution"]["controller"] == "mpi"


def test_a_node_lost_mid_run_ends_the_job_and_names_the_node(shared):
    """node2's container is killed while both ranks train: srun exits non-zero within 60 s, its error names
    node2, and no result is written. The node is started again afterwards."""
    name = f"lost-{uuid.uuid4().hex[:8]}"
    job = subprocess.Popen(
        [*cluster.compose_cmd(), "exec", "-T", "-w", "/shared", "head", "bash", "-c",
         f"srun -N2 -n2 --ntasks-per-node=1 bench torch-ddp {' '.join(SMALL[:-4])} --steps-per-window 5 "
         f"--windows 1000 --output {name}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=cluster.compose_env())
    try:
        deadline = time.monotonic() + 120
        while cluster.run_on("pgrep -f 'bench torch-ddp'", "node2", capture_output=True).returncode != 0:
            assert time.monotonic() < deadline and job.poll() is None, "the run did not start on node2"
            time.sleep(1)
        time.sleep(5)  # both ranks past start-up, training
        killed = time.monotonic()
        cluster.compose("kill", "node2")
        output, _ = job.communicate(timeout=120)
        took = time.monotonic() - killed
    finally:
        if job.poll() is None:
            job.kill()
        cluster.up()  # node2 back, idle
    errors = [line for line in output.splitlines() if line.startswith("srun: error:")]
    print(f"node lost: srun exited {job.returncode} after {took:.1f} s; {errors}")
    assert job.returncode != 0 and took < 60, (took, output[-3000:])
    assert any("node2" in line for line in errors), output[-3000:]  # srun's own error names the lost node
    assert not list((shared / name).glob("*.json"))


def test_allreduce_across_two_nodes(shared):
    name = f"allreduce-{uuid.uuid4().hex[:8]}"
    r = on_head(f"srun -N2 -n2 --ntasks-per-node=1 bench allreduce --backend torch --max-bytes 1M --models '' "
                f"--samples 3 --target-sample-s 0.05 --output {name}")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    (path,) = (shared / name).glob("*.json")
    result = json.loads(path.read_text())
    assert result["world_size"] == 2 and result["all_correct"] and result["launcher"] == "srun"
    assert sorted(rank["host"] for rank in result["environment"]["ranks"]) == ["node1", "node2"]


def test_sweep_inside_a_two_node_allocation_and_its_report(shared):
    """salloc -N2: bench sweep runs one srun step per cell (np 1 on one node, np 2 across both); bench report
    reads the folder where it lands on the host (the image has no plotting library)."""
    name = f"sweep-{uuid.uuid4().hex[:8]}"
    r = on_head(f"salloc -N2 --ntasks-per-node=1 bench sweep --modes torch-ddp --np 1,2 --models resnet50 "
                f"--image-size 32 --batch-sizes 2 --num-classes 10 --warmup-steps 0 --steps-per-window 1 "
                f"--windows 2 --output {name}")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    r = bench("report", str(shared / name))
    assert r.returncode == 0, r.stderr[-3000:]
    results = [json.loads(p.read_text()) for p in (shared / name).glob("2*.json")]
    assert sorted(x["world_size"] for x in results) == [1, 2]
    two = next(x for x in results if x["world_size"] == 2)
    assert sorted(rank["host"] for rank in two["environment"]["ranks"]) == ["node1", "node2"]
    assert (shared / name / "report.md").is_file()


@pytest.mark.parametrize("launcher", ["mpirun", "horovodrun"])
def test_across_containers_without_slurm(shared, launcher):
    """mpirun -H (Horovod over MPI) and horovodrun --gloo -H from the controller start one rank on each node
    over SSH."""
    name = f"{launcher}-{uuid.uuid4().hex[:8]}"
    start = {"mpirun": "mpirun -H node1,node2 -np 2 --bind-to none",
             "horovodrun": "horovodrun --gloo -np 2 -H node1:1,node2:1"}[launcher]
    r = on_head(f"{start} bench torch-horovod {' '.join(SMALL)} --output {name}")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    result = results_of(shared, name)
    assert_valid_run(result, "torch-horovod", 2, launcher)
    assert sorted(rank["host"] for rank in result["environment"]["ranks"]) == ["node1", "node2"]


def test_links_are_capped_and_released(shared):
    """benchmarks/shaped_links.py's filter: tbf at the asked rate on both nodes' links, and gone after."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import shaped_links

    try:
        shaped_links.shape("3gbit")
        for node in cluster.NODES:
            shown = cluster.run_on("tc qdisc show dev eth0", node, capture_output=True, text=True).stdout
            assert "tbf" in shown and "rate 3Gbit" in shown, (node, shown)
    finally:
        shaped_links.shape("none")
    for node in cluster.NODES:
        assert "tbf" not in cluster.run_on("tc qdisc show dev eth0", node, capture_output=True, text=True).stdout
    with pytest.raises(SystemExit, match="rate '3 gigabits' is not like 1gbit"):
        shaped_links.bits_per_s("3 gigabits")
