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
    with pytest.raises(BenchError, match=r"--compile default: TorchInductor .* lacks g\+\+ or c\+\+ or clang\+\+ on "
                       r"PATH; install them \(Debian: apt-get install g\+\+ python3-dev"):
        torch_common.resolve(RunConfig(mode="torch-ddp", model="resnet20", tuned=True, device="cpu"),
                             LaunchInfo("none"))
    # eager needs no compiler
    assert torch_common.resolve(RunConfig(mode="torch-ddp", model="resnet20", tuned=True, device="cpu",
                                          compile="none"), LaunchInfo("none")).compile == "none"


def test_missing_python_headers_are_named_as_a_missing_compiler_is(monkeypatch, tmp_path):
    """TorchInductor's kernels and Triton's launchers include Python.h: a machine with a compiler and no headers
    (a stock python3 without python3-dev) is refused in the same one line, naming the file."""
    import re
    import sysconfig

    from bench.errors import BenchError
    from bench.modes import torch_common

    assert torch_common.compiler_missing("cpu") is None  # this machine has both
    real = sysconfig.get_paths
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: {**real(*a, **k), "include": str(tmp_path)})
    assert torch_common.compiler_missing("cpu") == str(tmp_path / "Python.h")
    with pytest.raises(BenchError, match=re.escape(f"lacks {tmp_path / 'Python.h'}; install them")):
        torch_common.resolve(RunConfig(mode="torch-ddp", model="resnet20", compile="default", device="cpu"),
                             LaunchInfo("none"))
