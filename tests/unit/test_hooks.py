"""bench verify's requests reach a run as hooks beside its config, never as config fields."""

import dataclasses

import pytest

from bench.config import RunConfig
from bench.errors import BenchError
from bench.hooks import HOOKS_ENV, Hooks
from bench.modes import MODES


def test_hooks_travel_to_the_ranks_through_the_environment(monkeypatch):
    monkeypatch.delenv(HOOKS_ENV, raising=False)
    hooks = Hooks(snapshot_dir="/tmp/x", deterministic=True, data_shards=2, fault=None)
    with hooks.exported():
        assert Hooks.from_env() == hooks
    assert Hooks.from_env() == Hooks()  # restored: no hooks outside


def test_hooks_are_checked():
    with pytest.raises(BenchError, match="unknown fault"):
        Hooks(fault="drop-ranks")
    with pytest.raises(BenchError, match="data shards apply to the single-device modes only"):
        Hooks(data_shards=2).check(MODES["torch-ddp"])
    Hooks(data_shards=2).check(MODES["torch-single"])


def test_hooks_are_not_part_of_the_run_config():
    names = {f.name for f in dataclasses.fields(RunConfig)}
    assert not names & {"verify_dir", "data_shards", "fault", "snapshot_dir"}
    with pytest.raises(BenchError, match="unknown config keys: fault"):
        RunConfig.from_dict({"mode": "torch-ddp", "fault": "skip-allreduce"})


def test_strategies_belong_to_the_modes_that_have_them():
    assert RunConfig(mode="tf-native", strategy="ps").strategy == "ps"
    with pytest.raises(BenchError, match="--strategy does not apply to torch-ddp"):
        RunConfig(mode="torch-ddp", strategy="ps")
    with pytest.raises(BenchError, match="--num-ps does not apply to torch-ddp"):
        RunConfig(mode="torch-ddp", num_ps=2)
    with pytest.raises(BenchError, match="its strategies are multiworker, mirrored, ps"):
        RunConfig(mode="tf-native", strategy="allreduce")
