import re
import subprocess

import pytest

from bench.errors import BenchError
from bench.launching.detect import LaunchInfo, check_gpus_per_node, detect
from bench.launching.slurm import first_slurm_host, inside_allocation, srun_command


def test_no_launcher():
    assert detect({}).launcher == "none"


def test_torchrun():
    info = detect({"TORCHELASTIC_RUN_ID": "x", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                   "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "n1", "MASTER_PORT": "29500"})
    assert (info.launcher, info.rank, info.world_size, info.local_rank, info.local_world_size) == \
        ("torchrun", 3, 4, 1, 2)
    assert (info.master_addr, info.master_port) == ("n1", 29500)


def test_self_spawned_torch_and_horovod_styles():
    t = detect({"HVDBENCH_LAUNCHER": "self", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    assert (t.launcher, t.rank) == ("self", 1)
    h = detect({"HVDBENCH_LAUNCHER": "self", "HOROVOD_RANK": "0", "HOROVOD_SIZE": "2",
                "HOROVOD_LOCAL_RANK": "0", "HOROVOD_LOCAL_SIZE": "2"})
    assert (h.launcher, h.world_size) == ("self", 2)


def test_horovodrun_mpirun_srun():
    h = detect({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2"})
    assert (h.launcher, h.rank) == ("horovodrun", 1)
    m = detect({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})
    assert (m.launcher, m.rank, m.local_rank) == ("mpirun", 2, 0)
    s = detect({"SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
                "SLURM_NTASKS_PER_NODE": "4(x2)", "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "1234"})
    assert (s.launcher, s.rank, s.world_size, s.local_rank, s.local_world_size) == ("srun", 5, 8, 1, 4)
    assert s.master_addr == "gpu07" and s.master_port == 20000 + 64 * (1234 % 190)


@pytest.mark.parametrize("layout,node,expected", [("8(x2)", "1", 8), ("3(x2),2", "2", 2), ("3(x2),2", "0", 3),
                                                  ("garbled", "0", 16)])
def test_srun_ranks_per_node_come_from_the_steps_layout(layout, node, expected):
    """Numbers issue, finding 5: `srun -N2 -n16 --gpus-per-node=8` sets no SLURM_NTASKS_PER_NODE, and the job-wide
    SLURM_NTASKS (16) was taken as the ranks on this node ("16 ranks on this node but 8 GPU(s)"); the step's own
    layout says 8 on each node."""
    s = detect({"SLURM_STEP_ID": "0", "SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1",
                "SLURM_STEP_TASKS_PER_NODE": layout, "SLURM_NODEID": node, "SLURM_STEP_NODELIST": "gpu[07-09]",
                "SLURM_JOB_ID": "1234"})
    assert s.local_world_size == expected


def test_slurm_jobs_get_port_ranges_that_do_not_overlap_and_the_batch_scripts_agree():
    """Job N's ports are [base, base + 64): consecutive jobs never share one (job N's second task used to take
    job N+1's only port), the ranges stay below the ephemeral ports, and common.sh computes the same base."""
    import re
    from pathlib import Path

    from bench.launching.slurm import JOB_PORTS, job_port_base

    bases = sorted(job_port_base(j) for j in range(1000, 1190))
    assert len(set(bases)) == 190 and all(b - a >= JOB_PORTS for a, b in zip(bases, bases[1:], strict=False))
    assert min(bases) >= 20000 and max(bases) + JOB_PORTS <= 32768
    common = (Path(__file__).resolve().parents[2] / "singularity/slurm/common.sh").read_text()
    formula = re.search(r"MASTER_PORT=\$\(\((.+)\)\)", common).group(1)
    for job in (1, 63, 64, 189, 190, 123456):
        assert eval(formula.replace("SLURM_JOB_ID", str(job)).replace("/", "//")) == job_port_base(job)


def test_sbatch_script_without_step_is_not_a_rank():
    assert detect({"SLURM_JOB_ID": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}).launcher == "none"


@pytest.mark.parametrize("label, np_, num_ps, expected", [
    ("torch-ddp", 4, None, ["-n", "4"]),
    ("tf-horovod", 2, None, ["--mpi=pmix", "-n", "2"]),
    ("tf-native:ps", 2, None, ["-n", "4"]),  # the chief, one ps, two workers
    ("tf-native:ps", 2, 2, ["-n", "5"]),
    ("tf-native:mirrored", 1, None, ["-n", "1"]),
    ("torch-single", 1, None, ["-n", "1"]),
])
def test_srun_starts_each_variants_processes(label, np_, num_ps, expected):
    from bench.modes import variant

    argv = ["python", "-m", "bench", "run", "cell.json"]
    cmd = srun_command(variant(label), np_, argv, num_ps)
    assert cmd == ["srun", *expected[:-2], "--kill-on-bad-exit=1", *expected[-2:], *argv]


def test_inside_an_allocation_is_not_inside_a_step(monkeypatch):
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert not inside_allocation()
    monkeypatch.setenv("SLURM_JOB_ID", "12")  # salloc's shell, an sbatch script
    assert inside_allocation()
    monkeypatch.setenv("SLURM_STEP_ID", "0")  # one of srun's tasks
    assert not inside_allocation()


@pytest.mark.parametrize("env, message", [
    ({"OMPI_COMM_WORLD_RANK": "x", "OMPI_COMM_WORLD_SIZE": "2"}, "not an integer"),
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}, "not in"),
    ({"HOROVOD_RANK": "0"}, "HOROVOD_SIZE is not set"),
    ({"HVDBENCH_LAUNCHER": "self"}, "without rank variables"),
    ({"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_PORT": "99999"},
     "not a TCP port"),
])
def test_malformed_environments(env, message):
    with pytest.raises(BenchError, match=message):
        detect(env)


@pytest.mark.parametrize("nodelist, first", [
    ("node1", "node1"), ("node[03-05,7]", "node03"), ("gpu[1,3],cpu2", "gpu1"), ("a-b-c", "a-b-c"),
    ("n[1-2]-ib,x", "n1-ib")])
def test_slurm_nodelist(nodelist, first):
    assert first_slurm_host(nodelist) == first


def test_gpu_allocation_mismatch_is_a_clear_error():
    srun4 = LaunchInfo("srun", rank=0, world_size=8, local_rank=0, local_world_size=4)
    check_gpus_per_node(srun4, 4, {})
    check_gpus_per_node(srun4, 8, {})
    check_gpus_per_node(srun4, 1, {"SLURM_GPUS_PER_TASK": "1"})  # one bound GPU per task
    with pytest.raises(BenchError, match="4 ranks on this node but 2 GPU"):
        check_gpus_per_node(srun4, 2, {})
    with pytest.raises(BenchError, match="share GPUs"):
        check_gpus_per_node(srun4, 1, {})
    check_gpus_per_node(LaunchInfo("none"), 0, {})  # the spawner chooses --np itself


class FakeThreading:
    """Stands in for tf.config.threading: records the intra-op pool size asked for."""

    def __init__(self) -> None:
        self.intra = 0  # TF's default: every core

    def set_intra_op_parallelism_threads(self, n: int) -> None:
        self.intra = n


def tf_threads(monkeypatch, **environ: str) -> int:
    import types

    from bench.distributed.tfdist import set_cpu_threads

    for name in ("OMP_NUM_THREADS", "HVDBENCH_THREAD_SHARE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    threading = FakeThreading()
    set_cpu_threads(types.SimpleNamespace(config=types.SimpleNamespace(threading=threading)))
    return threading.intra


def test_tf_keeps_its_default_pool_under_the_spawners_share(monkeypatch):
    assert tf_threads(monkeypatch) == 0
    assert tf_threads(monkeypatch, OMP_NUM_THREADS="1", HVDBENCH_THREAD_SHARE="1") == 0


def test_tf_takes_the_thread_count_the_user_set(monkeypatch):
    assert tf_threads(monkeypatch, OMP_NUM_THREADS="3") == 3
    assert tf_threads(monkeypatch, OMP_NUM_THREADS="3", HVDBENCH_THREAD_SHARE="1") == 3
    with pytest.raises(BenchError, match="OMP_NUM_THREADS='many'"):
        tf_threads(monkeypatch, OMP_NUM_THREADS="many")


def test_spawner_marks_the_share_it_chose(monkeypatch):

    from bench.launching import supervise

    seen = []

    class Proc:
        pid = 0

    def popen(argv, env, start_new_session):
        seen.append(env)
        return Proc()

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(supervise, "wait_all", lambda procs, grace_s, servers, stall_dir, oom_before=None: 0)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    supervise.spawn(["torch-ddp"], [{}, {}], "{}")
    assert seen[0]["OMP_NUM_THREADS"] == seen[0]["HVDBENCH_THREAD_SHARE"]
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    seen.clear()
    supervise.spawn(["torch-ddp"], [{}, {}], "{}")
    assert seen[0]["OMP_NUM_THREADS"] == "5" and "HVDBENCH_THREAD_SHARE" not in seen[0]



TORCHRUN = {"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_PORT": "29500"}


@pytest.mark.parametrize("env, message", [
    (dict(TORCHRUN, MASTER_ADDR="no-such-host.invalid"), "MASTER_ADDR 'no-such-host.invalid'"),
    ({"TF_CONFIG": '{"cluster": {"worker": ["127.0.0.1:1", "nowhere.invalid:2"]}, "task": {"type": "worker", '
                   '"index": 0}}'}, "TF_CONFIG worker address 'nowhere.invalid'"),
    ({"TF_CONFIG": '{"cluster": {"worker": ["127.0.0.1:x"]}, "task": {"type": "worker", "index": 0}}'},
     "has no valid port"),
    ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "0", "HOROVOD_LOCAL_SIZE": "2",
      "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "0"}, "is not a TCP port"),
    ({"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
      "SLURM_STEP_NODELIST": "gone[1-2].invalid"}, "the Slurm node list's first host 'gone1.invalid'"),
])
def test_rendezvous_addresses_are_checked_before_any_wait(env, message):
    from bench.launching.detect import validate_rendezvous

    with pytest.raises(BenchError, match=re.escape(message)):
        validate_rendezvous(detect(env), env)
    validate_rendezvous(detect(TORCHRUN | {"MASTER_ADDR": "127.0.0.1"}), TORCHRUN | {"MASTER_ADDR": "127.0.0.1"})


def test_a_sigterm_at_the_jobs_end_time_is_said_to_be_the_time_limit():
    """squeue's end time for the job has come: Slurm's time limit sent the SIGTERM; before it: someone else."""
    from datetime import datetime

    from bench.launching import slurm

    end = datetime(2026, 11, 23, 22, 0, 30)
    asked = []

    def squeue(cmd, **kw):
        asked.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, f"{end.isoformat()}|0:30\n", "")

    job = {"SLURM_JOB_ID": "59"}
    at_end = end.timestamp() + 0.2
    assert slurm.slurm_time_limit(job, at_end, squeue) == "the job's Slurm time limit (0:30) was reached"
    assert asked == [["squeue", "-h", "-t", "all", "-j", "59", "-o", "%e|%l"]]
    assert slurm.slurm_time_limit(job, end.timestamp() - 20, squeue) is None  # scancel before the end
    assert slurm.slurm_time_limit({}, at_end, squeue) is None  # not under Slurm

    def gone(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, 3)

    assert slurm.slurm_time_limit(job, at_end, gone) is None


def test_rendezvous_ports_are_below_the_ephemeral_range(tmp_path):
    """Gate issue, item 1: free_port() bound port 0 (an ephemeral port), closed it and handed the number to ranks
    that bind it seconds later; any outgoing connection in between could take it (EADDRINUSE, seen in the
    diagnose tier). Ports now come from below the kernel's ephemeral range, which outgoing connections never
    take, and are drawn at random so that two runs started together differ."""
    import random

    from bench.launching import supervise

    low, _ = supervise.ephemeral_ports()
    ports = [supervise.free_port(random.Random(seed)) for seed in range(50)]
    assert all(supervise.LOCAL_PORTS[0] <= p < min(supervise.LOCAL_PORTS[1], low) for p in ports)
    assert len(set(ports)) > 40
    (tmp_path / "range").write_text("12000\t60999\n")
    assert supervise.ephemeral_ports(tmp_path / "range") == (12000, 60999)
    assert supervise.ephemeral_ports(tmp_path / "missing") == (32768, 60999)


def test_a_ranks_core_share_comes_from_its_affinity_and_its_cgroups_quota(tmp_path, monkeypatch):
    """Issue 66 item 8: os.cpu_count() is the host's. A container held to 2.5 cores (cgroup v2, the limit on a
    parent of the process's cgroup), or to 1.5 by cgroup v1's CFS quota, or a process bound to 3 cores, gives
    that many (rounded down); the loader's workers leave the rank one core of its share."""
    from bench.data.feed import default_workers
    from bench.launching import supervise

    v2 = tmp_path / "v2"
    (v2 / "job" / "step").mkdir(parents=True)
    (v2 / "cpu.max").write_text("max 100000\n")
    (v2 / "job" / "cpu.max").write_text("250000 100000\n")
    (v2 / "job" / "step" / "cpu.max").write_text("max 100000\n")
    own = tmp_path / "cgroup-v2"
    own.write_text("0::/job/step\n")
    assert supervise.cgroup_cpu_quota(v2, own) == 2.5
    v1 = tmp_path / "v1"
    (v1 / "cpu" / "docker" / "abc").mkdir(parents=True)
    (v1 / "cpu" / "docker" / "abc" / "cpu.cfs_quota_us").write_text("150000\n")
    (v1 / "cpu" / "docker" / "abc" / "cpu.cfs_period_us").write_text("100000\n")
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    own1 = tmp_path / "cgroup-v1"
    own1.write_text("4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n")
    assert supervise.cgroup_cpu_quota(v1, own1) == 1.5
    own1.write_text("3:cpu,cpuacct:/\n")
    assert supervise.cgroup_cpu_quota(v1, own1) is None  # the root: no quota
    assert supervise.cgroup_cpu_quota(v1, tmp_path / "missing") is None

    monkeypatch.setattr(supervise.os, "sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.setattr(supervise, "cgroup_cpu_quota", lambda: None)
    assert supervise.usable_cores() == 3 and supervise.cpu_thread_share(2) == 1
    monkeypatch.setattr(supervise, "cgroup_cpu_quota", lambda: 2.5)
    assert supervise.usable_cores() == 2
    monkeypatch.setattr(supervise, "cgroup_cpu_quota", lambda: 0.4)
    assert supervise.usable_cores() == 1  # at least one
    monkeypatch.setattr(supervise.os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(supervise, "cgroup_cpu_quota", lambda: None)
    assert [default_workers(n) for n in (1, 8, 64, 128)] == [63, 7, 1, 1]


# -- the spawner's and the watchdog's lines (in process) -----------------------------------------------------------
def test_the_cause_of_a_sigkill_is_said_only_when_the_kernel_counted_it(monkeypatch):
    from bench.launching import supervise

    monkeypatch.setattr(supervise, "oom_kills", lambda: 5)
    assert "out-of-memory killer ended it" in supervise.killed_how(9, 4)
    assert "if nobody killed it, likely out of memory" in supervise.killed_how(9, 5)
    assert "if nobody killed it" in supervise.killed_how(9, None)
    assert supervise.killed_how(15, 4) == "was killed by signal 15 (SIGTERM)"


class Ended:
    """A stand-in for a rank's Popen that has already ended with ``code``."""

    def __init__(self, code):
        self.returncode = code

    def poll(self):
        return self.returncode


@pytest.mark.parametrize("code,kills_after,line", [
    (-9, 5, "rank 1 was killed by signal 9 (SIGKILL): the kernel's out-of-memory killer ended it (the memory "
            "limit of its container or cgroup, or of the machine), first of the ranks; stopped the others, no "
            "result written; try a smaller --batch-size"),
    (-15, 5, "rank 1 was killed by signal 15 (SIGTERM), first of the ranks; stopped the others, no result written"),
    (2, 4, "rank 1 exited with code 2, first of the ranks; stopped the others, no result written"),
])
def test_the_spawners_line_names_the_rank_then_the_advice(monkeypatch, code, kills_after, line):
    from bench.errors import BenchError
    from bench.launching import supervise

    monkeypatch.setattr(supervise, "oom_kills", lambda: kills_after)
    monkeypatch.setattr(supervise, "stop_processes", lambda procs, grace_s: None)
    with pytest.raises(BenchError) as got:
        supervise.wait_all([Ended(None), Ended(code)], oom_before=4)
    assert str(got.value) == line


def test_watchdog_diagnosis(tmp_path):
    from bench.measure.watchdog import StallReport, Where, auto_bound, diagnose, read_reports

    def report(rank, where=Where("window", 3, 1), site=""):
        return StallReport(rank=rank, where=where, bound_s=60.0, waited_s=61.0, site=site)

    assert diagnose({0: report(0), 2: report(2)}, 3) == (
        "stalled: rank(s) 1 did not arrive (1: frozen (stopped, or stuck without releasing the interpreter)); "
        "rank(s) 0, 2 waited 60 s in window 3, step 1")
    assert "rank(s) 1 did not arrive (1: in window 2, step 3)" in diagnose({0: report(0),
                                                                             1: report(1, Where("window", 2, 3))}, 2)
    assert "rank(s) 0 did not arrive (0: in the first step)" in diagnose({0: report(0, Where()), 1: report(1)}, 2)
    assert "the collective itself hung" in diagnose({0: report(0), 1: report(1)}, 2)
    # where each rank's main thread waited (bench.measure.watchdog.site): the same call, or different places
    gloo = " in torch (.../distributed/distributed_c10d.py:10)"
    assert diagnose({0: report(0, site=gloo), 1: report(1, site=gloo)}, 2) == (
        f"stalled: every rank waited 60 s in window 3, step 1{gloo}: the collective itself hung (network, or a "
        "peer outside this job)")
    assert diagnose({0: report(0, site=" in torch (.../utils/data/dataloader.py:9)"),
                     1: report(1, site=gloo)}, 2) == (
        "stalled: every rank waited 60 s in window 3, step 1, at different places: rank 0 in torch "
        f"(.../utils/data/dataloader.py:9); rank 1{gloo}")
    # the files the ranks write, read back as they were written; a half-written one passed over
    (tmp_path / "rank-0.json").write_text(report(0, site=gloo).to_json())
    (tmp_path / "rank-1.json").write_text('{"rank": 1, "phase": "win')
    assert '"phase": "window"' in (tmp_path / "rank-0.json").read_text()  # flat, as the reports always were
    assert read_reports(tmp_path) == {0: report(0, site=gloo)}
    assert auto_bound(0.5, 4) == 120 and auto_bound(10.0, 4) == 800
