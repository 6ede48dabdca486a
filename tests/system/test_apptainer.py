"""The SIFs, for real: `make test-apptainer` sets up Apptainer (tools/apptainer-up.sh), needs the CPU image
from `make test-image`, and builds the SIF from that image (`make sif`) and from the generated definition file.

Runs inside one container (self-spawned ranks), the batch scripts under sbatch (their srun starts every task
as an `apptainer exec`; for the Horovod modes the host's PMIx and the container's Open MPI join them), a
non-root user, and the bad inputs users meet.
"""

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bench.modes import MODES
from tests.conftest import (
    ROOT,
    SCRIPTED,
    SMALL,
    TF_SMALL,
    assert_valid_run,
    bench_env,
    only_result,
    sbatch_scripted,
    sbatch_wait_line,
    tool,
)
from tools.benchmarks import endings

# The first test to use a SIF fixture may build it (about 7 minutes each on 2 cores): a longer bound.
pytestmark = [pytest.mark.apptainer, pytest.mark.timeout(2400)]

SCRIPTS = ROOT / "singularity" / "slurm"


# Built SIFs are kept here between runs (world-readable, for the non-root test); each is rebuilt when its
# inputs change (the Docker image's ID, or the definition file and what it copies in).
SIF_DIR = Path(os.environ.get("HVDBENCH_SIF_DIR", "/var/cache/hvdbench/sif"))
USER = "hvdbench-test"


def sh(cmd, env=None, timeout=900, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, **kw)


def with_apptainer(e: dict) -> dict:
    """``e`` with Apptainer first on PATH (tools/apptainer-up.sh sets it up once, and names its folder)."""
    up = sh([str(ROOT / "tools" / "apptainer-up.sh")], timeout=1200)
    if up.returncode != 0:
        pytest.fail(f"apptainer-up failed: {up.stderr[-2000:]}")
    return dict(e, PATH=f"{up.stdout.strip().splitlines()[-1]}:{e['PATH']}")


@pytest.fixture(scope="module")
def host_env():
    slurm = sh([str(ROOT / "tools" / "slurm-up.sh")], timeout=300)
    if slurm.returncode != 0:
        pytest.fail(f"slurm-up failed: {slurm.stderr[-2000:]}")
    return with_apptainer(bench_env(SLURM_CONF=slurm.stdout.strip().splitlines()[-1]))


# The SIFs are keyed by their heavy part alone (sif.py --cache frameworks: the image's frameworks stage, or the
# definition and its files less bench/), so a change to bench/ rebuilds neither; every test runs this
# checkout's bench in them, bound over the one the SIF was built with (APPTAINER_BIND, in `env`). They are
# squashed with zstd: about 2.5 minutes less per build than gzip here, and the tests then run zstd SIFs too.
SIF_CACHE = ["--cache", "frameworks", "--compression", "zstd"]


def image_sif(host_env: dict, flavor: str) -> Path:
    """The SIF of a flavour's image (built by its image tier), as `make sif FLAVOR=...` builds it."""
    SIF_DIR.mkdir(parents=True, exist_ok=True)
    SIF_DIR.chmod(0o755)
    out = SIF_DIR / f"hvdbench-current-{flavor}.sif"
    r = sh([*tool("sif"), "image", "--stack", "current", "--flavor", flavor,
            *SIF_CACHE, "--output", str(out)], env=host_env, cwd=ROOT, timeout=3600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    print(r.stdout.strip().splitlines()[-1])
    out.chmod(0o644)
    # the name the batch scripts and the README's srun line use points at the SIF made last there
    assert os.readlink(SIF_DIR / "hvdbench.sif") == out.name
    return out


@pytest.fixture(scope="module")
def sif(host_env):
    """The SIF of the CPU image (built by `make test-image`), as `make sif` builds it."""
    return image_sif(host_env, "cpu")


@pytest.fixture(scope="module")
def def_sif(host_env):
    """singularity/hvdbench-current-cpu.def built by apptainer, on the local debootstrapped base image."""
    out = SIF_DIR / "hvdbench-current-cpu-def.sif"
    r = sh([*tool("sif"), "def", "--stack", "current", "--flavor", "cpu",
            "--base", "hvdbench-base:bookworm", *SIF_CACHE, "--output", str(out)], env=host_env,
           cwd=ROOT, timeout=2400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    print(r.stdout.strip().splitlines()[-1])
    return out


@pytest.fixture(scope="module")
def package_path(host_env, sif):
    """Where the SIFs have bench installed (the same in both: one Dockerfile): in site-packages."""
    # -I and cwd /: not this checkout's bench through the current directory, the SIF's installed one
    r = sh(["apptainer", "exec", str(sif), "python", "-I", "-c", "import bench; print(bench.__path__[0])"],
           env=host_env, cwd="/")
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip()


@pytest.fixture(scope="module")
def env(host_env, package_path):
    """The host's environment with this checkout's bench bound over the SIFs' own in every apptainer command."""
    return dict(host_env, APPTAINER_BIND=f"{ROOT / 'bench'}:{package_path}:ro")


def apptainer(env, *args, timeout=600, **kw):
    return sh(["apptainer", *args], env=env, timeout=timeout, **kw)


def test_the_image_sif_has_bench_and_the_image_labels(env, sif):
    for runtime in ("apptainer", "singularity"):  # both names work, as on clusters that have either
        r = sh([runtime, "exec", str(sif), "bench", "--version"], env=env)
        assert r.returncode == 0 and "hvdbench" in r.stdout, r.stderr
    labels = json.loads(apptainer(env, "inspect", "--json", "--labels", str(sif)).stdout)
    labels = labels["data"]["attributes"]["labels"]
    assert labels["io.hvdbench.stack"] == "current" and labels["io.hvdbench.flavor"] == "cpu"


def test_the_sif_is_skipped_while_its_frameworks_did_not_change(host_env, sif):
    r = sh([*tool("sif"), "image", "--stack", "current", "--flavor", "cpu",
            *SIF_CACHE, "--output", str(sif)], env=host_env, cwd=ROOT)
    assert r.returncode == 0 and "is up to date" in r.stdout, r.stdout + r.stderr


@pytest.mark.smoke
def test_the_sif_runs_this_checkouts_bench(env, sif, package_path):
    """The bind is in place (the SIF's mount table shows it) and the SIF's bench is this checkout's, to the byte."""
    assert "site-packages" in package_path, package_path
    r = sh(["apptainer", "exec", str(sif), "cat", "/proc/self/mountinfo"], env=env)
    assert r.returncode == 0 and f" {package_path} " in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    probe = ("import hashlib, inspect, bench.cli; "
             "print(hashlib.sha256(inspect.getsource(bench.cli).encode()).hexdigest())")
    inside = sh(["apptainer", "exec", str(sif), "python", "-I", "-c", probe], env=env, cwd="/").stdout.strip()
    here = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip()
    assert inside and inside == here, (inside, here)


def test_the_definition_file_builds_and_its_test_help_and_labels_work(env, def_sif):
    r = apptainer(env, "test", str(def_sif))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "[X] PyTorch" in r.stdout and "[X] MPI" in r.stdout
    r = apptainer(env, "run-help", str(def_sif))
    assert r.returncode == 0 and "srun --mpi=pmix apptainer exec" in r.stdout
    r = apptainer(env, "inspect", str(def_sif))
    assert "io.hvdbench.horovod-patched: yes" in r.stdout, r.stdout


def test_definition_sif_runs_a_two_rank_job(env, def_sif, out):
    r = apptainer(env, "exec", "--bind", str(out.parent), str(def_sif), "bench", "torch-horovod", *SMALL,
                  "--np", "2", "--output", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert_valid_run(only_result(out), "torch-horovod", 2, "self")


@pytest.mark.smoke
def test_exec_self_spawned_ranks_inside_one_container(env, sif, out):
    r = apptainer(env, "exec", "--bind", str(out.parent), str(sif), "bench", "torch-ddp", *SMALL, "--np", "2",
                  "--output", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    result = only_result(out)
    assert_valid_run(result, "torch-ddp", 2, "self")
    assert result["environment"]["image"]["stack"] == "current", result["environment"]["image"]


# Every mode through its batch script with HVDBENCH_RUNTIME=apptainer: each task an `apptainer exec` of the SIF
# that srun started (with --mpi=pmix for the Horovod modes: the host's PMIx and the SIF's Open MPI join the
# ranks). One run per mode serves both the script and srun's side; the jobs are submitted together.
@pytest.fixture(scope="module")
def sbatch_jobs(env, sif, tmp_path_factory):
    return sbatch_scripted(env, tmp_path_factory, HVDBENCH_RUNTIME="apptainer", HVDBENCH_SIF=str(sif))


@pytest.mark.parametrize("script, extra, mode", SCRIPTED)
def test_sbatch_scripts_with_apptainer(sbatch_jobs, script, extra, mode):
    code, logs, results, elapsed = sbatch_jobs[mode]
    assert code == 0, logs[-3000:]
    assert "runtime apptainer" in logs
    result = only_result(results)
    assert_valid_run(result, mode, 2, "srun")
    assert [rank["local_rank"] for rank in result["environment"]["ranks"]] == [0, 1]
    assert result["environment"]["image"]["stack"] == "current" and result["environment"]["image"]["flavor"] == "cpu"
    if MODES[mode].needs_mpi:
        assert result["environment"]["distribution"]["controller"] == "mpi"
    print(f"sbatch {script} {mode} under apptainer: {elapsed:.1f} s from submission to result")


def test_sigterm_to_apptainer_exec_stops_every_rank(env, sif, tmp_path):
    """apptainer passes the signal to bench, whose self-spawner stops its ranks: nothing is left, no result."""
    r = endings.signal_launcher(["apptainer", "exec", "--bind", str(tmp_path), str(sif), "bench"],
                                ["torch-ddp", *endings.SMALL, "--np", "2"], signal.SIGTERM,
                                tmp_path)
    assert r["ranks"] >= 2, r["stderr"][-2000:]
    assert r["left"] == [] and r["results"] == [], r
    assert r["returncode"] == 143 and "stopped by SIGTERM" in r["stderr"], r["stderr"][-2000:]
    print(f"SIGTERM to apptainer exec: {r['seconds']:.2f} s until no process was left")


@pytest.mark.parametrize("mode, mpi", [("torch-ddp", []), ("tf-horovod", ["--mpi=pmix"])])
def test_scancel_of_srun_apptainer_leaves_nothing(env, sif, tmp_path, mode, mpi):
    args = [mode, *(endings.TF_SMALL if mode.startswith("tf") else endings.SMALL)]
    r = endings.scancel_srun(args, mpi, tmp_path, env, bench=["apptainer", "exec", "--bind", str(tmp_path),
                                                              str(sif), "bench"])
    assert r["ranks"] >= 2, r["stderr"][-2000:]
    assert r["left"] == [] and r["results"] == [], r
    print(f"scancel of srun apptainer exec {mode}: {r['seconds']:.2f} s until no process was left")


@pytest.fixture(scope="module")
def user():
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--create-home", USER], check=True)
    return pwd.getpwnam(USER)


def test_a_non_root_user_runs_the_sif_and_owns_the_results(env, sif, user):
    # Outside pytest's root-only temporary tree: a directory of the user's own, as on a cluster.
    work = Path(tempfile.mkdtemp(prefix="hvdbench-user-", dir="/tmp"))
    os.chown(work, user.pw_uid, user.pw_gid)
    e = {k: v for k, v in env.items() if not k.startswith("OMPI_ALLOW")}
    e.update(HOME=user.pw_dir, USER=USER, LOGNAME=USER)
    # The checkout's bench may lie outside the directories the wrapper shows (a CI clone under /check): a user
    # cannot make its mount point in the wrapper's root filesystem, so root's call makes it first, as an
    # administrator's would (tools/apptainer-up.sh).
    assert sh(["apptainer", "version"], env=env).returncode == 0
    # The user's own PATH (no /usr/sbin, where pivot_root lives), with what tools/apptainer-up.sh tells them to
    # add: root set it up, so it prints the wrappers' folder for them too.
    runuser = shutil.which("runuser", path=env["PATH"])  # root's tool, by its path: not on the user's PATH
    e["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    up = sh([runuser, "-u", USER, "--", str(ROOT / "tools" / "apptainer-up.sh")], env=e, cwd=work)
    assert up.returncode == 0, up.stderr
    e["PATH"] = f"{up.stdout.strip()}:{e['PATH']}"
    r = sh([runuser, "-u", USER, "--", "apptainer", "exec", str(sif), "bench", "torch-ddp", *SMALL, "--np", "2",
            "--output", str(work / "results")], env=e, cwd=work, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    result = only_result(work / "results")
    assert_valid_run(result, "torch-ddp", 2, "self")
    files = [p for p in (work / "results").rglob("*")]
    try:
        assert files and {p.stat().st_uid for p in files} == {user.pw_uid}
    finally:
        shutil.rmtree(work)


def source_common(env, tmp_path, **extra):
    """The batch scripts' shared set-up, as a job would run it (before any srun)."""
    e = dict(env, SLURM_JOB_ID="1", SLURM_JOB_NODELIST="localhost", SLURM_JOB_NUM_NODES="1", SLURM_NTASKS="2",
             HVDBENCH_RESULTS=str(tmp_path / "results"), **extra)
    return sh(["bash", "-c", f"source {SCRIPTS / 'common.sh'}"], env=e, cwd=tmp_path, timeout=300)


def test_batch_scripts_run_the_sif_make_sif_linked_by_default(env, sif, tmp_path):
    """Without HVDBENCH_SIF the scripts take ./hvdbench.sif, the link `make sif` leaves beside the SIF it built."""
    e = dict(env, SLURM_JOB_ID="1", SLURM_JOB_NODELIST="localhost", SLURM_JOB_NUM_NODES="1", SLURM_NTASKS="2",
             HVDBENCH_RESULTS=str(tmp_path / "results"), HVDBENCH_RUNTIME="apptainer")
    e.pop("HVDBENCH_SIF", None)
    r = sh(["bash", "-c", f"source {SCRIPTS / 'common.sh'} && echo \"$HVDBENCH_SIF\""], env=e, cwd=SIF_DIR,
           timeout=300)
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip().splitlines()[-1]) == SIF_DIR / "hvdbench.sif"


def test_batch_scripts_say_what_is_wrong_in_one_line(env, sif, tmp_path):
    r = source_common(env, tmp_path, HVDBENCH_RUNTIME="apptainer", HVDBENCH_SIF=str(tmp_path / "missing.sif"))
    assert r.returncode != 0 and r.stderr.strip() == f"hvdbench: no image at {tmp_path / 'missing.sif'} (HVDBENCH_SIF)"
    not_a_sif = tmp_path / "not.sif"
    not_a_sif.write_text("text\n")
    r = source_common(env, tmp_path, HVDBENCH_RUNTIME="apptainer", HVDBENCH_SIF=str(not_a_sif))
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"hvdbench: apptainer cannot run bench from {not_a_sif}: FATAL:"), r.stderr
    path = ":".join(p for p in env["PATH"].split(":") if not (Path(p) / "singularity").exists())
    r = source_common(dict(env, PATH=path), tmp_path, HVDBENCH_RUNTIME="singularity", HVDBENCH_SIF=str(sif))
    assert r.returncode != 0 and r.stderr.strip() == "hvdbench: singularity is not on PATH", r.stderr


def test_an_image_without_bench_is_named(host_env, tmp_path):
    """A SIF of another image (the plain Debian base) is refused with one line before any task starts."""
    base = SIF_DIR / "debian-base.sif"
    if not base.is_file():
        with_archive = tmp_path / "base.tar"
        subprocess.run([shutil.which("docker") or "docker", "save", "-o", str(with_archive),
                        "hvdbench-base:bookworm"], check=True)
        r = apptainer(host_env, "build", str(base), f"docker-archive://{with_archive}", timeout=900)
        assert r.returncode == 0, r.stderr[-2000:]
    r = source_common(host_env, tmp_path, HVDBENCH_RUNTIME="apptainer", HVDBENCH_SIF=str(base))
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"hvdbench: apptainer cannot run bench from {base}: "), r.stderr
    assert '"bench": executable file not found' in r.stderr, r.stderr


def test_sif_tool_says_what_is_missing_in_one_line(env, tmp_path):
    r = sh([*tool("sif"), "image", "--stack", "nosuch"], env=env, cwd=ROOT)
    assert r.returncode == 1 and r.stderr.strip().startswith("sif: error: unknown stack 'nosuch'"), r.stderr
    missing = ("from tools import sif\ntry:\n    sif.image_id('hvdbench-no-such:image')\n"
               "except sif.SifError as e:\n    print(e)")
    r = sh([sys.executable, "-c", missing], env=env, cwd=ROOT)
    assert r.stdout.startswith("no local Docker image hvdbench-no-such:image: build it first"), r.stdout + r.stderr
    no_runtime = dict(env, PATH="/usr/bin:/bin", HVDBENCH_APPTAINER_DIR=str(tmp_path))
    r = sh([*tool("sif"), "runtime"], env=no_runtime, cwd=ROOT)
    assert r.returncode == 1 and "neither apptainer nor singularity is installed" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def apptainer_cluster(sif):
    """The container cluster (docker/cluster/) with Apptainer inside its nodes: privileged nodes that see the
    host's Apptainer set-up and the SIF directory at the host's paths (docker/cluster/apptainer.yaml); taken down
    after the module."""
    from tools import cluster

    try:
        cluster.build()
        cluster.up(apptainer=True)
    except Exception as exc:  # noqa: BLE001 - the cluster's own one-line reason
        with contextlib.suppress(Exception):  # what did come up goes down; the reason is up's
            cluster.down()
        pytest.fail(f"the cluster with Apptainer did not come up ({exc})")
    try:
        yield cluster
    finally:  # however the module's tests end, no node is left running
        cluster.down()


@pytest.mark.cluster
@pytest.mark.parametrize("script, mode", [("ddp.sbatch", "torch-ddp"), ("horovod.sbatch", "tf-horovod")])
def test_sbatch_scripts_with_apptainer_across_the_cluster_nodes(apptainer_cluster, sif, package_path, script,
                                                                 mode):
    """The batch scripts as users submit them on a cluster with Apptainer: every task an `apptainer exec` of
    the SIF on its own node, one per node; tf-horovod's ranks join through the nodes' PMIx."""
    cluster = apptainer_cluster
    name = f"apptainer-{mode}-{os.urandom(4).hex()}"
    args = " ".join(TF_SMALL if mode.startswith("tf") else SMALL)
    # The nodes' own bench is this checkout's (their image's last layer, or the checkout's bound over it where
    # the gate kept the node image: HVDBENCH_CLUSTER_BENCH): bound over the SIF's, as on the host.
    r = cluster.run_on(f"mkdir {name} && cd {name} && PATH={cluster.APPTAINER_PATH}:$PATH "
                       f"APPTAINER_BIND={package_path}:{package_path}:ro "
                       f"HVDBENCH_RUNTIME=apptainer HVDBENCH_SIF={sif} HVDBENCH_RESULTS=/shared/{name}/results "
                       f"BENCH_ARGS='{args}' "
                       + sbatch_wait_line(f"--nodes=2 --ntasks-per-node=1 --cpus-per-task=1 "
                                          f"/opt/hvdbench/slurm/{script}"),
                       capture_output=True, text=True, errors="replace", timeout=900)
    folder = cluster.shared_dir() / name
    logs = "\n".join(p.read_text() for p in folder.glob("hvdbench-*.out"))
    assert r.returncode == 0, (r.stdout + r.stderr + logs)[-3000:]
    assert "runtime apptainer" in logs
    result = only_result(folder / "results")
    assert_valid_run(result, mode, 2, "srun")
    assert sorted(rank["host"] for rank in result["environment"]["ranks"]) == ["node1", "node2"]
    assert result["environment"]["container"] == "apptainer/singularity"  # bench from the SIF, not the node's
    assert result["environment"]["image"]["stack"] == "current"


# bench diagnose where srun is with no framework importable: what a login node's `pip install` of bench alone holds
ORCHESTRATOR = ("python3 -c \"import sys; sys.modules.update(dict.fromkeys(('torch', 'tensorflow', 'horovod'))); "
                "from bench.cli import main; main()\"")


@pytest.mark.cluster
def test_diagnose_where_srun_is_runs_every_step_in_the_sif(apptainer_cluster, sif, package_path):
    """first-run.md's diagnose for a SIF's users: `salloc -N2 bench diagnose --container 'apptainer exec SIF'`, the
    diagnosing process without the frameworks, every phase's steps (the devices alone, the pair, the job) an
    `apptainer exec` of the SIF on the nodes, and their results read back into one record that passes."""
    cluster = apptainer_cluster
    name = f"diagnose-sif-{os.urandom(4).hex()}"
    r = cluster.run_on(f"OMP_NUM_THREADS=1 PATH={cluster.APPTAINER_PATH}:$PATH "
                       f"APPTAINER_BIND={package_path}:{package_path}:ro salloc -N2 {ORCHESTRATOR} diagnose "
                       f"--container 'apptainer exec {sif}' --run-args '{' '.join(SMALL)}' --large-bytes 1M "
                       f"--output /shared/{name}", capture_output=True, text=True, errors="replace", timeout=900)
    found = list((cluster.shared_dir() / name).glob("diagnose-*/diagnose.json"))
    assert len(found) == 1, (r.stdout + r.stderr)[-3000:]
    record = json.loads(found[0].read_text())
    assert r.returncode == 0 and record["passed"], (r.stdout[-2000:], record["findings"])
    assert record["config"]["container"] == ["apptainer", "exec", str(sif)]
    steps = [s for phase in ("devices", "network", "job") for s in record["phases"][phase]["steps"]]
    assert len(steps) == 4 and all(s["exit_code"] == 0 for s in steps)
    for s in steps:
        at = s["command"].index("apptainer")
        assert s["command"][at:at + 3] == ["apptainer", "exec", str(sif)], s["command"]
    results = sorted(found[0].parent.glob("*/*/*.json")) + sorted(found[0].parent.glob("job/*.json"))
    hosts = set()
    for path in results:
        environment = json.loads(path.read_text())["environment"]
        assert environment["container"] == "apptainer/singularity", path  # bench from the SIF, not the node's
        hosts |= {rank["host"] for rank in environment["ranks"]}
    assert len(results) == 4 and hosts == {"node1", "node2"}  # two devices alone, the pair's allreduce, the job
