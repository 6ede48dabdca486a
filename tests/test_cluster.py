"""Across nodes: the containerised Slurm cluster (docker/cluster/, `make cluster-up`): controller head,
compute nodes node1 and node2, each a container from the CPU image plus Slurm and munge, sharing
results/cluster as /shared.

The fixture starts the cluster (or reuses a running one); every run goes through the controller's srun,
one rank per node, and its result must show both hosts.
"""

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import SMALL, assert_valid_run

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docker"))
import cluster  # noqa: E402


@pytest.fixture(scope="module")
def shared():
    try:
        cluster.up()
    except Exception as exc:  # noqa: BLE001 - the cluster's own one-line reason
        pytest.fail(f"the cluster did not come up ({exc}); run `make cluster-up`")
    return cluster.shared_dir()


def on_head(command: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return cluster.run_on(command, capture_output=True, text=True, timeout=timeout)


def results_of(shared: Path, name: str) -> dict:
    files = sorted((shared / name).glob("*.json"))
    assert len(files) == 1, files
    from bench.results import load_result

    return load_result(files[0])


@pytest.mark.parametrize("mode, mpi", [("torch-ddp", ""), ("torch-horovod", "--mpi=pmix")])
def test_srun_one_rank_per_node(shared, mode, mpi):
    name = f"{mode}-{uuid.uuid4().hex[:8]}"
    r = on_head(f"srun -N2 -n2 --ntasks-per-node=1 {mpi} bench {mode} {' '.join(SMALL)} --output {name}")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    result = results_of(shared, name)
    assert_valid_run(result, mode, 2, "srun")
    ranks = result["environment"]["ranks"]
    assert sorted(rank["host"] for rank in ranks) == ["node1", "node2"], json.dumps(ranks)
    assert [rank["local_rank"] for rank in ranks] == [0, 0]
