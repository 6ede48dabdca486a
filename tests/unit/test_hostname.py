"""A host whose own name does not resolve (docker run --network none, fresh containers, some clusters).

Horovod 0.28.1 as released crashes there (SIGSEGV in Gloo's host-name lookup for its process-set context);
hvdbench's patched build and the check in bench.distributed.hvdist make one node work over loopback and
give one clear line across nodes.
"""


import pytest

from bench.distributed import hvdist
from bench.errors import BenchError
from bench.launching.detect import LaunchInfo, resolve_error

ONE_NODE = LaunchInfo("self", 0, 2, 0, 2)
TWO_NODES = LaunchInfo("srun", 0, 2, 0, 1)


def unresolvable(name: str) -> str:
    return "Temporary failure in name resolution"


def resolvable(name: str) -> None:
    return None


def test_resolvable_name_changes_nothing():
    environ: dict[str, str] = {}
    hvdist.check_host_name(TWO_NODES, environ, "node1", resolvable, level=0)
    assert environ == {}


def test_one_node_falls_back_to_loopback():
    environ: dict[str, str] = {}
    hvdist.check_host_name(ONE_NODE, environ, "box", unresolvable, level=2)
    assert environ == {"HOROVOD_GLOO_IFACE": "lo"}


def test_an_interface_the_user_chose_is_kept():
    environ = {"HOROVOD_GLOO_IFACE": "eth1"}
    hvdist.check_host_name(TWO_NODES, environ, "box", unresolvable, level=2)
    assert environ == {"HOROVOD_GLOO_IFACE": "eth1"}


def test_across_nodes_names_the_host_and_the_fix():
    with pytest.raises(BenchError) as err:
        hvdist.check_host_name(TWO_NODES, {}, "node7", unresolvable, level=2)
    text = str(err.value)
    assert "'node7' does not resolve" in text and "Temporary failure" in text
    assert "/etc/hosts" in text and "HOROVOD_GLOO_IFACE" in text


def test_stock_horovod_is_refused_even_on_one_node():
    with pytest.raises(BenchError, match="'box' does not resolve.*crashes in Gloo"):
        hvdist.check_host_name(ONE_NODE, {}, "box", unresolvable, level=0)


def test_real_resolver():
    assert resolve_error("localhost") is None
    assert resolve_error("no-such-host.invalid") is not None


def test_uses_gloo():
    class Hvd:
        def __init__(self, mpi: bool) -> None:
            self.mpi = mpi

        def mpi_built(self) -> bool:
            return self.mpi

    assert hvdist.uses_gloo(Hvd(True), {"HOROVOD_CONTROLLER": "gloo"})
    assert hvdist.uses_gloo(Hvd(True), {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1"})
    assert hvdist.uses_gloo(Hvd(False), {})
    assert not hvdist.uses_gloo(Hvd(True), {})  # mpirun / srun --mpi=pmix: the MPI controller
