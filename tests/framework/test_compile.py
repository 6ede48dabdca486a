"""--compile and --fused-optimizer (the tuned profile's model settings): the same training as the eager loop."""

import dataclasses

import pytest
import torch

from bench.config import RunConfig
from bench.launching.detect import LaunchInfo
from bench.modes import torch_single


def losses(cfg: RunConfig, steps: int) -> tuple[list[float], object]:
    trainer = torch_single.make_trainer(cfg, LaunchInfo("none"), None)
    trainer.setup()
    out = []
    for _ in range(steps):
        trainer.step()
        with torch.no_grad():  # the loss of the weights the step left, through the trainer's own model
            out.append(float(torch.nn.functional.cross_entropy(trainer.model(trainer.data), trainer.target)))
    return out, trainer


def test_a_compiled_fused_run_takes_the_eager_runs_steps():
    base = RunConfig(mode="torch-single", model="resnet20", batch_size=4, image_size=32, num_classes=10,
                     channels_last=True)
    eager_cfg = base.resolve("cpu", 1)
    assert (eager_cfg.compile, eager_cfg.fused_optimizer) == ("none", False)
    tuned_cfg = dataclasses.replace(base, tuned=True).resolve("cpu", 1)
    assert (tuned_cfg.compile, tuned_cfg.fused_optimizer, tuned_cfg.profile) == ("default", True, "cpu-tuned")
    eager, _ = losses(eager_cfg, 4)
    compiled, trainer = losses(tuned_cfg, 4)
    assert trainer.compiled_graphs() >= 1  # the model really ran through TorchDynamo
    assert trainer.optimizer.defaults["fused"] is True
    assert len(set(eager)) == 4  # the steps moved the weights: the comparison below can fail
    # the same steps from the same weights; the compiled kernels sum in another order (fp32 rounding)
    assert compiled == pytest.approx(eager, rel=2e-3)


def test_a_missing_compiler_is_one_line_before_any_rank_starts(monkeypatch):
    from bench.errors import BenchError
    from bench.modes import torch_common

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(BenchError, match=r"--compile default: TorchInductor .* \(g\+\+ or c\+\+ or clang\+\+\)"):
        torch_common.resolve(RunConfig(mode="torch-ddp", model="resnet20", tuned=True, device="cpu"),
                             LaunchInfo("none"))
    # eager needs no compiler
    assert torch_common.resolve(RunConfig(mode="torch-ddp", model="resnet20", tuned=True, device="cpu",
                                          compile="none"), LaunchInfo("none")).compile == "none"
