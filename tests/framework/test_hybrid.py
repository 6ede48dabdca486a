"""torch-hybrid (Parallax's hybrid on TorchRec): the table sharded row-wise, the rest under DDP. Its bytes per step
(computed and measured), bench allreduce --op alltoall, bench predict's all-to-all term, and what it refuses.
bench verify's PASS and the skipped exchange's FAIL are in tests/multiproc/test_sparse.py, beside the other modes'."""


import pytest

from bench.config import RunConfig
from bench.errors import BenchError


@pytest.mark.parametrize("args, message", [
    (["--model", "vgg16"], "torch-hybrid shards a token embedding over the ranks"),
    (["--model", "transformer-small", "--sparse-embeddings", "--sparse-as-dense"], "--sparse-as-dense"),
    (["--model", "transformer-small", "--precision", "amp-bf16"], "torch-hybrid runs fp32"),
])
def test_what_it_refuses_is_one_line(args, message, tmp_path):
    from bench.launching.detect import LaunchInfo
    from bench.modes import torch_hybrid

    options = {"model": args[1]}
    if "--sparse-as-dense" in args:
        options.update(sparse_embeddings=True, sparse_as_dense=True)
    if "--precision" in args:
        options["precision"] = "amp-bf16"
    with pytest.raises(BenchError, match=message):
        torch_hybrid.preflight(RunConfig(mode="torch-hybrid", **options), LaunchInfo("none"))


def test_without_torchrec_it_is_one_line_naming_the_install(monkeypatch):
    import sys

    from bench.errors import MissingDependency
    from bench.launching.detect import LaunchInfo
    from bench.modes import torch_hybrid

    monkeypatch.setitem(sys.modules, "torchrec", None)
    with pytest.raises(MissingDependency, match="pip install -r requirements/hybrid.txt"):
        torch_hybrid.preflight(RunConfig(mode="torch-hybrid", model="transformer-small"), LaunchInfo("none"))
