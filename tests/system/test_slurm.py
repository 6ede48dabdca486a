"""bench on a real one-node Slurm cluster (tools/slurm-up.sh starts munge, slurmctld and slurmd).

sbatch of every batch script under singularity/slurm with HVDBENCH_RUNTIME=none (no Apptainer here), whose
srun starts every mode's ranks. Multi-node runs are not exercised: one slurmd per host (Debian's Slurm is built
without --enable-multiple-slurmd).
"""

import json
import subprocess

import pytest

from bench.modes import MODES
from tests.conftest import ROOT, SCRIPTED, SMALL, assert_valid_run, bench_env, only_result, sbatch_scripted, sbatch_wait

pytestmark = pytest.mark.slurm

SCRIPTS = ROOT / "singularity" / "slurm"


@pytest.fixture(scope="module")
def slurm_env():
    r = subprocess.run([str(ROOT / "tools" / "slurm-up.sh")], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail(f"could not start Slurm: {r.stderr}")
    return bench_env(SLURM_CONF=r.stdout.strip().splitlines()[-1])


def srun(env, *args, timeout=300):
    return subprocess.run(["srun", *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_srun_allocation_mismatch_is_clear(slurm_env, out):
    r = srun(slurm_env, "-n2", "bench", "torch-ddp", *SMALL, "--np", "4", "--output", str(out))
    assert r.returncode != 0
    assert "--np 4 does not match the 2 ranks srun started" in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


# Every mode through its batch script, whose srun (with --mpi=pmix for the Horovod modes) starts the ranks: one
# run per mode serves both the script and srun's side (the ranks' Slurm environment, PMIx). The four jobs are
# submitted together and waited for together (slurm.conf declares enough CPUs for all of them).
@pytest.fixture(scope="module")
def sbatch_jobs(slurm_env, tmp_path_factory):
    # torch-horovod's job trains from a dataset: the scripts' HVDBENCH_DATA (docs/data.md)
    from bench.data.make import MakeConfig, make

    data = tmp_path_factory.mktemp("data") / "jpegs"
    make(MakeConfig(path=str(data), images=20, classes=4, image_size=40))
    return sbatch_scripted(slurm_env, tmp_path_factory, {"torch-horovod": {"HVDBENCH_DATA": str(data)}},
                           HVDBENCH_RUNTIME="none")


@pytest.mark.smoke
@pytest.mark.parametrize("script, extra_env, mode", SCRIPTED)
def test_sbatch_scripts_without_container(sbatch_jobs, script, extra_env, mode):
    code, logs, results, elapsed = sbatch_jobs[mode]
    assert code == 0, logs[-3000:]
    result = only_result(results)
    assert_valid_run(result, mode, 2, "srun")
    assert result["environment"]["slurm_job_id"]
    assert [r["local_rank"] for r in result["environment"]["ranks"]] == [0, 1]  # not every rank local 0
    if MODES[mode].needs_mpi:  # srun --mpi=pmix: the ranks joined through PMIx
        assert result["environment"]["distribution"]["controller"] == "mpi"
    assert result["input"]["source"] == ("dataset" if mode == "torch-horovod" else "synthetic")
    print(f"sbatch {script} {mode}: {elapsed:.1f} s from submission to result")


def test_sbatch_bad_runtime_says_so(slurm_env, tmp_path):
    env = dict(slurm_env, HVDBENCH_RUNTIME="docker", HVDBENCH_RESULTS=str(tmp_path / "results"))
    r = sbatch_wait(["--nodes=1", "--ntasks-per-node=1", str(SCRIPTS / "ddp.sbatch")], timeout=120, env=env,
                    cwd=tmp_path)
    assert r.returncode != 0
    (log,) = tmp_path.glob("hvdbench-*.out")
    assert "HVDBENCH_RUNTIME must be apptainer, singularity or none (got 'docker')" in log.read_text()


def test_sweep_inside_an_allocation_runs_one_srun_step_per_cell(slurm_env, tmp_path):
    folder = tmp_path / "sweep"
    r = subprocess.run(["salloc", "-n2", "bench", "sweep", "--modes", "torch-ddp", "--np", "1,2", "--models",
                        "resnet50", "--image-size", "32", "--batch-sizes", "2", "--warmup-steps", "0",
                        "--steps-per-window", "1", "--windows", "2", "--num-classes", "10", "--output", str(folder)],
                       capture_output=True, text=True, env=slurm_env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    results = [json.loads(p.read_text()) for p in folder.glob("2*.json")]
    assert sorted(x["world_size"] for x in results) == [1, 2]
    assert {x["launcher"] for x in results} == {"srun"}


@pytest.mark.parametrize("label", ["torch-ddp", "tf-horovod"])
def test_scancel_leaves_no_rank_behind(slurm_env, tmp_path, label):
    from tools.benchmarks import endings

    args, mpi = endings.MODES[label]
    r = endings.scancel_srun(args, mpi, tmp_path, slurm_env)
    assert r["ranks"] == 2, r["stderr"][-2000:]
    assert r["left"] == [] and r["returncode"] != 0, r  # none left within scancel_srun's guard (120 s)
    assert r["results"] == []
