"""tf-native's parameter-server roles under srun, in process: which task each Slurm task becomes, and the layouts it
refuses (bench.distributed.tfdist imports TensorFlow; the runs themselves: tests/multiproc/test_tf_modes.py)."""

import re

import pytest

SLURM_STEP = {"SLURM_STEP_ID": "0", "SLURM_JOB_ID": "7", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "4",
              "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_LOCALID": "0"}


@pytest.mark.parametrize("procid, role", [(0, ("chief", 0)), (1, ("ps", 0)), (2, ("worker", 0)), (3, ("worker", 1))])
def test_ps_roles_under_srun_come_from_the_task_ids(monkeypatch, procid, role):
    """srun -N2 -n4 --ntasks-per-node=2: node1 holds the chief and the ps, node2 the two workers."""
    from bench.distributed import tfdist
    from bench.launching.detect import detect, parse_tf_config

    for k, v in {**SLURM_STEP, "SLURM_PROCID": str(procid)}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SLURM_DISTRIBUTION", raising=False)
    cluster, task_type, index = parse_tf_config(tfdist.ps_tf_config(detect(), num_ps=1))
    assert (task_type, index) == role
    port = 20000 + 64 * 7  # the first port of job 7's range (bench.launching.slurm.job_port_base)
    assert cluster == {"chief": [f"node1:{port}"], "ps": [f"node1:{port + 1}"],
                       "worker": [f"node2:{port}", f"node2:{port + 1}"]}


@pytest.mark.parametrize("env, message", [
    ({"SLURM_PROCID": "0", "SLURM_DISTRIBUTION": "cyclic"}, "needs Slurm's block task distribution"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "1(x2)"},
     "srun -n 3 or more (got 2)"),
])
def test_ps_under_srun_refuses_what_it_cannot_place(monkeypatch, env, message):
    from bench.distributed import tfdist
    from bench.errors import BenchError
    from bench.launching.detect import detect

    for k, v in {**SLURM_STEP, **env}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(BenchError, match=re.escape(message)):
        tfdist.ps_tf_config(detect(), num_ps=1)
