"""A step's hosts from Slurm's environment, and which of them still answer (the stall watchdog's probe)."""

import socket

import pytest

from bench.launching import slurm


@pytest.mark.parametrize("nodelist, hosts", [
    ("node1", ["node1"]),
    ("node[1-2]", ["node1", "node2"]),
    ("node[01-03,7],gpu5", ["node01", "node02", "node03", "node7", "gpu5"]),
    ("n[1-2]-ib,login", ["n1-ib", "n2-ib", "login"]),
])
def test_node_lists_expand_as_slurm_writes_them(nodelist, hosts):
    assert slurm.expand_nodelist(nodelist) == hosts


def test_task_counts_expand():
    assert slurm.expand_counts("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(ValueError):
        slurm.expand_counts("two")


def test_ranks_take_their_hosts_in_node_list_order():
    env = {"SLURM_STEP_NODELIST": "node[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2,1"}
    assert slurm.rank_hosts(env) == ["node1", "node1", "node2"]
    assert slurm.rank_hosts({**env, "SLURM_DISTRIBUTION": "cyclic"}) is None  # not block: unknown
    assert slurm.rank_hosts({"SLURM_STEP_NODELIST": "node[1-2]", "SLURM_STEP_TASKS_PER_NODE": "1"}) is None


def test_the_hosts_that_stopped_answering_are_named_with_their_ranks():
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    closed = socket.create_server(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    env = {"SLURM_STEP_NODELIST": "node1,127.0.0.1", "SLURM_STEP_TASKS_PER_NODE": "1,2"}
    try:
        assert slurm.unanswered(env, 0, port) == ""  # rank 0 on node1; 127.0.0.1 (ranks 1, 2) answers
        assert slurm.unanswered(env, 0, closed_port) == "; no answer from 127.0.0.1 (ranks 1, 2) (node or link down)"
        assert slurm.unanswered({}, 0, port) == ""  # not under srun: nothing to say
    finally:
        listening.close()
