import re

import pytest

from bench.config import CPU_PROFILE, GPU_PROFILE, Device, Precision, RunConfig
from bench.errors import BenchError


def test_defaults_resolve_per_device():
    cfg = RunConfig(mode="torch-ddp")
    gpu = cfg.resolve("cuda", 8)
    assert (gpu.batch_size, gpu.image_size, gpu.np, gpu.profile) == (64, 224, 8, GPU_PROFILE.name)
    assert (gpu.warmup_steps, gpu.steps_per_window, gpu.windows) == (10, 10, 10)
    cpu = cfg.resolve("cpu", 2)
    assert (cpu.batch_size, cpu.image_size, cpu.device) == (CPU_PROFILE.batch_size, 64, Device.cpu)
    assert RunConfig(mode="torch-ddp", model="inception3").resolve("cuda", 1).image_size == 299
    # explicit values win over the profile; warmup 0 is allowed
    mine = RunConfig(mode="torch-ddp", batch_size=3, warmup_steps=0).resolve("cuda", 1)
    assert (mine.batch_size, mine.warmup_steps) == (3, 0)


@pytest.mark.parametrize("kwargs, message", [
    ({"mode": "nope"}, "unknown mode"),
    ({"mode": "torch-ddp", "model": "alexnet"}, "unknown model"),
    ({"mode": "torch-ddp", "batch_size": 0}, "--batch-size"),
    ({"mode": "torch-ddp", "steps_per_window": 0}, "--steps-per-window"),
    ({"mode": "torch-ddp", "windows": -1}, "--windows"),
    ({"mode": "torch-ddp", "np": 0}, "--np"),
    ({"mode": "torch-ddp", "warmup_steps": -1}, "--warmup-steps"),
    ({"mode": "torch-ddp", "duration": 0}, "--duration"),
    ({"mode": "torch-ddp", "image_size": 16}, "--image-size"),
    ({"mode": "torch-ddp", "model": "inception3", "image_size": 224}, "--image-size"),
    ({"mode": "torch-ddp", "precision": "fp8"}, "fp8"),
])
def test_bad_values_are_rejected(kwargs, message):
    with pytest.raises((BenchError, ValueError), match=message):
        RunConfig(**kwargs)


def test_json_round_trip_and_frozen():
    cfg = RunConfig(mode="torch-horovod", precision=Precision.amp_bf16, fp16_allreduce=True).resolve("cpu", 2)
    again = RunConfig.from_json(cfg.to_json())
    assert again == cfg
    with pytest.raises(AttributeError):
        cfg.batch_size = 1  # type: ignore[misc]
    with pytest.raises(BenchError, match="unknown config keys"):
        RunConfig.from_dict({"mode": "torch-ddp", "bogus": 1})
    with pytest.raises(BenchError, match="not valid JSON"):
        RunConfig.from_json("{")


@pytest.mark.parametrize("mode,model,message", [
    ("tf-horovod", "resnet50", "--channels-last applies to the PyTorch modes; tf-horovod is TensorFlow"),
    ("tf-single", "vgg16", "--channels-last applies to the PyTorch modes; tf-single is TensorFlow"),
    ("torch-ddp", "transformer-small", "--channels-last applies to image models; transformer-small trains on "
                                       "sequences"),
])
def test_channels_last_is_refused_where_it_cannot_work(mode, model, message):
    """Numbers issue, finding 11: with a Transformer it failed after the rendezvous; TensorFlow modes ignored it
    while the result recorded it as set. Refused in the config check, before anything starts."""
    with pytest.raises(BenchError, match=re.escape(message)):
        RunConfig(mode=mode, model=model, channels_last=True)
    assert RunConfig(mode="torch-ddp", model="resnet50", channels_last=True).channels_last


def test_the_tuned_profile_fills_what_the_user_left_unset():
    """--tuned beside the paper's profile: the batch that fills a GPU, the compiled model, NHWC for CNNs and the fused
    optimizer; what the user sets wins, and the profile leaves out what cannot apply."""
    paper = RunConfig(mode="torch-ddp", model="resnet50").resolve("cuda", 8)
    assert (paper.profile, paper.batch_size, paper.compile, paper.channels_last, paper.fused_optimizer) == \
        ("gpu-paper", 64, "none", False, False)
    tuned = RunConfig(mode="torch-ddp", model="resnet50", tuned=True).resolve("cuda", 8)
    assert (tuned.profile, tuned.batch_size, tuned.compile, tuned.channels_last, tuned.fused_optimizer) == \
        ("gpu-tuned", 256, "default", True, True)
    assert tuned.precision == Precision.fp32  # precision is the user's in both profiles
    mine = RunConfig(mode="torch-ddp", model="resnet50", tuned=True, batch_size=128, compile="reduce-overhead",
                     channels_last=False, fused_optimizer=False).resolve("cuda", 8)
    assert (mine.batch_size, mine.compile, mine.channels_last, mine.fused_optimizer) == \
        (128, "reduce-overhead", False, False)
    cpu = RunConfig(mode="torch-ddp", model="resnet50", tuned=True).resolve("cpu", 2)
    assert (cpu.profile, cpu.batch_size, cpu.compile) == ("cpu-tuned", 8, "default")
    text = RunConfig(mode="torch-ddp", model="transformer-small", tuned=True, sparse_embeddings=True)
    assert (text.resolve("cpu", 2).channels_last, text.resolve("cpu", 2).fused_optimizer) == (False, False)
    tf = RunConfig(mode="tf-horovod", model="resnet50", tuned=True).resolve("cuda", 8)
    assert (tf.profile, tf.batch_size, tf.compile, tf.fused_optimizer, tf.xla) == ("gpu-tuned", 256, None, None, True)
    assert tf.compiles and not RunConfig(mode="tf-horovod", model="resnet50").resolve("cuda", 8).compiles
    assert (paper.xla, tuned.xla) == (None, None)  # XLA is TensorFlow's
    assert RunConfig(mode="tf-horovod", model="resnet50", tuned=True, xla=False).resolve("cuda", 8).xla is False
    # parameter servers hold the variables away from the device XLA compiles for: --tuned leaves XLA out there
    ps = RunConfig(mode="tf-native", model="resnet50", tuned=True, strategy="ps").resolve("cuda", 2)
    assert (ps.profile, ps.xla) == ("gpu-tuned", False)
    # XLA's CPU code is slower than TensorFlow's own there (docs/measured/2026-11-27-xla.md): a GPU's setting
    cpu = RunConfig(mode="tf-horovod", model="resnet50", tuned=True).resolve("cpu", 2)
    assert (cpu.profile, cpu.xla) == ("cpu-tuned", False)
    assert RunConfig(mode="tf-horovod", model="resnet50", tuned=True, xla=True).resolve("cpu", 2).xla is True
    assert RunConfig.from_json(tuned.to_json()) == tuned


@pytest.mark.parametrize("kwargs, device, message", [
    ({"mode": "tf-horovod", "compile": "default"}, None, "--compile applies to the PyTorch modes; tf-horovod is "
                                                         "TensorFlow"),
    ({"mode": "torch-ddp", "compile": "fast"}, None, "--compile takes none, default, max-autotune, reduce-overhead"),
    ({"mode": "tf-single", "fused_optimizer": True}, None, "--fused-optimizer applies to the PyTorch modes"),
    ({"mode": "torch-ddp", "xla": True}, None, "--xla applies to the TensorFlow modes; torch-ddp is PyTorch"),
    ({"mode": "tf-native", "strategy": "ps", "xla": True}, None, "--xla: XLA compiles a step on the device that "
                                                                 "holds its variables"),
    ({"mode": "tf-horovod", "model": "transformer-small", "sparse_embeddings": True, "xla": True}, None,
     "--xla makes the embedding's gradient dense inside the compiled pass"),
    ({"mode": "torch-ddp", "model": "transformer-small", "sparse_embeddings": True, "fused_optimizer": True}, "cpu",
     "--fused-optimizer: torch's fused kernels take dense gradients"),
])
def test_tuning_options_that_cannot_apply_are_one_line(kwargs, device, message):
    with pytest.raises(BenchError, match=re.escape(message)):
        cfg = RunConfig(**kwargs)
        cfg.resolve(device, 2)


def test_the_fused_optimizer_is_left_out_where_torch_has_none():
    """Adagrad's fused kernel runs on the CPU only: --tuned leaves it out on a GPU, and asking for it is one line
    (the dataset-free path of the check: RunConfig._no_fused_optimizer)."""
    assert RunConfig(mode="torch-ddp", model="resnet20")._no_fused_optimizer("cuda") is None
    adagrad = RunConfig(mode="torch-ddp", model="resnet20")
    object.__setattr__(adagrad, "optimizer", "adagrad")  # --optimizer needs --epochs and a dataset to construct
    assert "CPU only" in adagrad._no_fused_optimizer("cuda")
    assert adagrad._no_fused_optimizer("cpu") is None


def test_horovods_knobs_are_horovod_modes_options_and_reach_its_variables():
    from bench.distributed.hvdist import knob_values, set_knobs

    cfg = RunConfig(mode="torch-horovod", fusion_threshold="64M", cycle_time=3.5, nccl_streams=2)
    assert cfg.fusion_threshold == 64 * 1024**2  # written as a size, kept in bytes
    environ = {"HOROVOD_CYCLE_TIME": "1"}
    set_knobs(cfg, environ)  # the options win over the variables
    assert environ == {"HOROVOD_FUSION_THRESHOLD": "67108864", "HOROVOD_CYCLE_TIME": "3.5",
                       "HOROVOD_NUM_NCCL_STREAMS": "2"}
    assert knob_values(environ) == {"fusion_threshold": 67108864, "cycle_time": 3.5, "nccl_streams": 2,
                                    "knobs_set": ["cycle_time", "fusion_threshold", "nccl_streams"]}
    assert knob_values({}) == {"fusion_threshold": 128 * 1024**2, "cycle_time": 1.0, "nccl_streams": 1,
                               "knobs_set": []}
    assert RunConfig.from_json(cfg.to_json()) == cfg
    for name, value in (("fusion_threshold", 0), ("cycle_time", 2.0), ("nccl_streams", 2)):
        with pytest.raises(BenchError, match=f"--{name.replace('_', '-')} does not apply to torch-ddp"):
            RunConfig(mode="torch-ddp", **{name: value})
    with pytest.raises(BenchError, match="cannot read '1X' as a size"):
        RunConfig(mode="tf-horovod", fusion_threshold="1X")
