"""Across nodes: the containerised Slurm cluster (docker/cluster/, `make cluster-up`): controller head,
compute nodes node1 and node2, each a container from the CPU image plus Slurm and munge, sharing
results/cluster as /shared.

The fixture starts the cluster (or reuses a running one); every run goes through the controller's srun,
one rank per node, and its result must show both hosts.
"""

import json
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from bench.modes import MODES
from tests.conftest import (
    BENCH_DIGEST,
    SMALL,
    TF_SMALL,
    assert_valid_run,
    checkout_bench_digest,
    sbatch_wait_line,
)
from tools import cluster

pytestmark = pytest.mark.cluster


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
    from bench.records.results import load_result

    load_result(files[0])  # bench reads it back as its model
    return json.loads(files[0].read_text())


@pytest.mark.smoke
def test_every_node_runs_this_checkouts_bench(shared):
    """The controller's and each node's bench is this checkout's, to the byte: the node image's own, or the
    checkout's bound over it where the gate kept that image (HVDBENCH_CLUSTER_BENCH, tools/cluster.py)."""
    here = checkout_bench_digest()
    for node in ("head", *cluster.NODES):
        r = cluster.run_on(f'python3 -I -c "{BENCH_DIGEST}"', node, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == here, (node, r.stdout[-500:], r.stderr[-1000:])


# torch-ddp and tf-horovod cross the nodes through their batch scripts' srun (test_sbatch_scripts_across_two_nodes).
@pytest.mark.smoke
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
    """node2's container is killed while both ranks train: srun exits non-zero (a run that would train for hours
    ends within the guard), its error names node2, and no result is written. The node is started again
    afterwards."""
    name = f"lost-{uuid.uuid4().hex[:8]}"
    job = subprocess.Popen(
        [*cluster.compose_cmd(), "exec", "-T", "-w", "/shared", "head", "bash", "-c",
         f"srun -N2 -n2 --ntasks-per-node=1 bench torch-ddp {' '.join(SMALL[:-4])} --steps-per-window 5 "
         f"--windows 100000 --output {name}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=cluster.compose_env())
    try:
        deadline = time.monotonic() + 300
        while cluster.run_on("pgrep -f 'bench torch-ddp'", "node2", capture_output=True).returncode != 0:
            assert time.monotonic() < deadline and job.poll() is None, "the run did not start on node2"
            time.sleep(1)
        time.sleep(5)  # both ranks past start-up, training
        killed = time.monotonic()
        cluster.compose("kill", "node2")
        # 100,000 windows train for hours: the job ending within this deadlock guard is the lost node's doing
        output, _ = job.communicate(timeout=300)
        took = time.monotonic() - killed
    finally:
        if job.poll() is None:
            job.kill()
        cluster.up()  # node2 back, idle
    errors = [line for line in output.splitlines() if line.startswith("srun: error:")]
    print(f"node lost: srun exited {job.returncode} after {took:.1f} s; {errors}")
    assert job.returncode != 0, (took, output[-3000:])
    assert any("node2" in line for line in errors), output[-3000:]  # srun's own error names the lost node
    assert not list((shared / name).glob("*.json"))


class Job:
    """A command run on the controller, its output lines kept with the moment each arrived."""

    def __init__(self, command: str) -> None:
        import threading

        self.lines: list[tuple[float, str]] = []
        self.proc = subprocess.Popen(
            [*cluster.compose_cmd(), "exec", "-T", "-w", "/shared", "head", "bash", "-c", command],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=cluster.compose_env())
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    @property
    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def wait_for(self, text: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hit = next((t for t, line in self.lines if text in line), None)
            if hit is not None:
                return hit
            assert self.proc.poll() is None, f"ended before '{text}':\n{self.output[-3000:]}"
            time.sleep(0.2)
        raise AssertionError(f"no '{text}' within {timeout:.0f} s:\n{self.output[-3000:]}")

    def end(self, timeout: float) -> float:
        """Wait for the job to end; when it did (monotonic)."""
        self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return time.monotonic()

    def kill(self, name: str | None = None) -> None:
        """End the command here and, by its Slurm job name, the job it started (killing `docker exec` here does
        not end srun in the container)."""
        if self.proc.poll() is None:
            self.proc.kill()
        if name:
            cluster.run_on(f"scancel -n {name}", capture_output=True)


# Both modes at once, one rank on each node, running until something ends them.
FAULT_MODES = {"torch-ddp": ("", SMALL), "tf-horovod": ("--mpi=pmix", TF_SMALL)}


def start_fault_jobs(srun_options: str, bench_options: str, one_by_one: bool = False) -> dict[str, tuple[Job, str]]:
    """Both modes' jobs; ``one_by_one``: each started once the one before is in its timed windows, both on the
    smallest model, so that a short stall bound is not reached by a step that the other job starved of the
    two shared cores (ResNet-50's steps took over 15 s so)."""
    jobs = {}
    for mode, (mpi, small) in reversed(FAULT_MODES.items()) if one_by_one else FAULT_MODES.items():
        if one_by_one and jobs:
            next(iter(jobs.values()))[0].wait_for("window 1/", 300)
        name = f"fault-{mode}-{uuid.uuid4().hex[:8]}"
        args = " ".join((TF_SMALL if one_by_one else small)[:-4])  # the model and batch, not the step counts
        jobs[mode] = (Job(f"srun -J {name} -N2 -n2 --ntasks-per-node=1 {mpi} {srun_options} bench {mode} {args} "
                          f"--warmup-steps 1 --steps-per-window 5 --windows 100000 {bench_options} --output {name}"),
                      name)
    return jobs


def bench_left(mode: str) -> dict[str, str]:
    """Processes of ``bench MODE`` still running, by node (none: {})."""
    left = {}
    for node in cluster.NODES:
        r = cluster.run_on(f"pgrep -af 'bench {mode}' | grep -v pgrep || true", node, capture_output=True, text=True)
        if r.stdout.strip():
            left[node] = r.stdout.strip()
    return left


def wait_nothing_left(timeout: float) -> dict[str, dict[str, str]]:
    deadline = time.monotonic() + timeout
    while True:
        left = {mode: found for mode in FAULT_MODES if (found := bench_left(mode))}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1)


def test_a_link_cut_mid_run_ends_the_job_and_names_the_node(shared):
    """node2's link goes down while both modes train across the nodes (the node itself stays up): each job
    ends (its time after the cut is printed: about the stall bound plus srun's wait), a line naming node2 (rank
    0's, with its rank, or Slurm's node failure, whichever comes first); nothing runs on either node afterwards
    (node2's ranks end by their own stall watchdog, unreachable as they are) and no result is written. The link comes
    back after, and node2 with it."""
    stall = 30  # a step of the smallest model took over 15 s once with other runs on the host's two cores
    jobs = start_fault_jobs("", f"--stall-timeout {stall}", one_by_one=True)
    try:
        for job, _ in jobs.values():  # both in their timed windows
            job.wait_for("window 2/", 300)
        cut = time.monotonic()
        assert cluster.run_on("ip link set eth0 down", "node2").returncode == 0
        took = {mode: job.end(timeout=240) - cut for mode, (job, _) in jobs.items()}
        # node2's ranks: their own watchdog, the link still down (a deadlock guard: returns once none is left)
        left = wait_nothing_left(stall + 240)
    finally:
        cluster.run_on("ip link set eth0 up", "node2")
        for job, name in jobs.values():
            job.kill(name)
    cluster.up()  # node2 back in service (ReturnToService=2)
    for mode, (job, name) in jobs.items():
        errors = [line for _, line in job.lines if "error" in line]
        print(f"link cut, {mode}: exit {job.proc.returncode} after {took[mode]:.1f} s; {errors}")
        assert job.proc.returncode != 0, job.output[-3000:]
        # the node is named: by rank 0's stall line (the host that stopped answering, and its rank), or by Slurm's
        # own when its node-failure check ends the step first (the two race: both take about the stall bound)
        assert any("no answer from node2 (rank 1)" in line or "Node failure on node2" in line
                   for line in errors), job.output[-3000:]
        assert not list((shared / name).glob("*.json"))
    assert left == {}, left


def test_a_slurm_time_limit_mid_run_ends_the_job_and_says_so(shared):
    """A time limit reached while the jobs train: the three jobs start together on two shared cores with 5
    minutes (on a machine whose caches are cold their imports alone took over a minute), and once each has
    taken its first step its limit is cut to one minute (Slurm counts in minutes), which it has passed or soon
    will: the test waits no longer than the jobs need to start. Under srun (both modes, across the nodes) every
    task gets Slurm's SIGTERM and ends at once, Slurm's own line saying it was the time limit; in a batch job
    that runs bench's own spawner (one node, no srun), bench's line says it, with the limit as it is now. Each
    ends (its time is printed; the wait for it is a deadlock guard, as Slurm's SIGKILL after its kill wait,
KillWait=5, ends a task that ignored the SIGTERM within it all the same), leaves nothing running and writes no
result."""
    jobs = start_fault_jobs("-t 5", "")
    spawned = f"fault-spawned-{uuid.uuid4().hex[:8]}"
    batch = Job(sbatch_wait_line(
        f"-J {spawned} -N1 -n1 --cpus-per-task=2 --time=5 -o {spawned}.out --wrap 'bench torch-ddp --np 2 "
        f"{' '.join(SMALL[:-4])} --warmup-steps 1 --steps-per-window 5 --windows 100000 --output {spawned}'"))
    try:
        for job, _ in jobs.values():
            job.wait_for("first step done", 240)  # training before the limit: mid-run
        deadline = time.monotonic() + 240
        while "first step done" not in ((shared / f"{spawned}.out").read_text(errors="replace")
                                        if (shared / f"{spawned}.out").exists() else ""):
            assert time.monotonic() < deadline and batch.proc.poll() is None, batch.output[-3000:]
            time.sleep(0.5)
        for name in [name for _, name in jobs.values()] + [spawned]:
            cut = cluster.run_on(f"scontrol update JobId=$(squeue -h -n {name} -o %i) TimeLimit=1",
                                 capture_output=True, text=True)
            assert cut.returncode == 0, cut.stdout + cut.stderr
        limit = {mode: job.wait_for("DUE TO TIME LIMIT", 180) for mode, (job, _) in jobs.items()}
        ended = {mode: job.end(timeout=60) for mode, (job, _) in jobs.items()}
        batch.end(timeout=180)
    finally:
        batch.kill(spawned)
        for job, name in jobs.values():
            job.kill(name)
    left = wait_nothing_left(120)  # a deadlock guard: returns once none is left
    for mode, (job, name) in jobs.items():
        took = ended[mode] - limit[mode]
        print(f"time limit, {mode}: exit {job.proc.returncode}, {took:.1f} s after Slurm's line; "
              f"{[line for _, line in job.lines if 'error' in line or 'LIMIT' in line]}")
        assert job.proc.returncode != 0, (took, job.output[-3000:])
        assert not list((shared / name).glob("*.json"))
    log = (shared / f"{spawned}.out").read_text(errors="replace")
    lines = [line for line in log.splitlines() if "error" in line]
    print(f"time limit, bench's spawner in a batch job: exit {batch.proc.returncode}; {lines}")
    assert batch.proc.returncode != 0, log[-3000:]
    assert any(re.search(r"error: stopped by SIGTERM; all 2 process\(es\) stopped, no result written \(the job's "
                         r"Slurm time limit \(1:00\) was reached\)", line) for line in lines), log[-3000:]
    assert not list((shared / spawned).glob("*.json"))
    assert left == {}, left


def test_a_rank_killed_for_memory_in_a_node_container_is_named(shared):
    """node2's container gets a 1 GiB memory limit and a 2-rank run whose batch does not fit: the kernel's
    out-of-memory killer ends a rank, and the spawner's line names the rank, the signal and the cause, with
    what to try; nothing is left running. The limit is lifted after."""
    container = cluster.compose("ps", "-q", "node2", capture_output=True, text=True).stdout.strip()
    assert container
    name = f"oom-{uuid.uuid4().hex[:8]}"
    docker = ["docker", "update", "--memory", "1g", "--memory-swap", "1g", container]
    assert subprocess.run(docker, capture_output=True, text=True).returncode == 0
    try:
        started = time.monotonic()
        r = cluster.run_on(f"bench torch-ddp --np 2 --model vgg16 --image-size 224 --batch-size 64 --warmup-steps 0 "
                           f"--steps-per-window 1 --windows 1 --output {name}", "node2", capture_output=True,
                           text=True, errors="replace", timeout=300)
        took = time.monotonic() - started
    finally:  # `docker update` cannot remove a limit (0 keeps it): the machine's whole memory is none; the swap
        # limit is raised with it (cgroup v1 refuses a memory limit above the memory+swap one)
        total_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                         if line.startswith("MemTotal:"))
        subprocess.run(["docker", "update", "--memory", f"{total_kib}k", "--memory-swap", f"{2 * total_kib}k",
                        container], capture_output=True)
    line = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    print(f"out of memory in node2: exit {r.returncode} after {took:.1f} s: {line}")
    assert r.returncode == 1, r.stderr[-3000:]
    assert line.startswith("error: rank ") and "was killed by signal 9 (SIGKILL): the kernel's out-of-memory " \
        "killer ended it" in line and line.endswith("try a smaller --batch-size"), r.stderr[-3000:]
    assert bench_left("torch-ddp") == {}
    assert not list((shared / name).glob("*.json"))
    limit = subprocess.run(["docker", "inspect", "-f", "{{.HostConfig.Memory}}", container], capture_output=True,
                           text=True).stdout.strip()
    assert int(limit) >= 8 * 2**30, limit  # node2 has its memory back for the tests after this one


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
    reads it on the controller, where a cluster user reads it (the image's own report, plots and page)."""
    name = f"sweep-{uuid.uuid4().hex[:8]}"
    r = on_head(f"salloc -N2 --ntasks-per-node=1 bench sweep --modes torch-ddp --np 1,2 --models resnet50 "
                f"--image-size 32 --batch-sizes 2 --num-classes 10 --warmup-steps 0 --steps-per-window 1 "
                f"--windows 2 --output {name}")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    r = on_head(f"bench report {name} --html")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert (shared / name / "report.html").read_text().count('src="data:image/png;base64,') == 2
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
    """tools/benchmarks/shaped_links.py's filter: tbf at the asked rate on both nodes' links, and gone after."""
    from tools.benchmarks import shaped_links

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
