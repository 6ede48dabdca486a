"""Model registry. Specs are plain data (no framework import): sizes, the workload (inputs and unit),
where each framework's builder lives, and the training FLOPs per sample.

Training FLOPs per sample (for model FLOP/s and MFU) are counted, not estimated: PyTorch's
FlopCounterMode runs one forward and backward pass of the model on the meta device (shapes only, no
arithmetic, about a second) and counts every matmul and convolution: 2 FLOPs per multiply-add,
forward and backward (input and weight gradients). Element-wise work (activations, norms, the
optimizer) is not counted, as in the usual MFU definitions. The count needs PyTorch: a process without
it (a TensorFlow rank in the CUDA image, whose frameworks live in separate environments) asks the PyTorch
environment (HVDBENCH_PYTHON_TORCH, bench.launching.envs) to count, so a TensorFlow result carries the
same figure as its PyTorch twin; with no PyTorch anywhere the figure is absent. Another package adds
models with :func:`register` (see bench.plugins).

A count is kept in ``~/.cache/hvdbench/flops`` ($XDG_CACHE_HOME honoured; HVDBENCH_FLOPS_CACHE=off turns it
off), keyed by everything it depends on: the model's name and input shape, the installed PyTorch's version and
the source files of the model's builder and of the workloads. A TensorFlow rank then need not import PyTorch
(over a second) to write its result, and a PyTorch rank need not trace the model again.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Protocol

from bench import files
from bench.errors import BenchError
from bench.launching import envs
from bench.models.workloads import IMAGES, SEQUENCES, Workload


class Shaped(Protocol):
    """What a run's input shape is read from: its config (bench.config.RunConfig) or the config a result kept
    (bench.records.schema.RunSettings)."""
    model: str
    image_size: int | None
    seq_len: int | None


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    default_image_size: int | None  # image models only
    min_image_size: int | None
    params_1000: int  # parameter count at 1000 classes (torchvision's figure for the same architecture)
    head_inputs: tuple[int, ...]  # inputs of each classifier layer whose width is the class count
    torch: str  # "module:function"; function(num_classes) -> torch.nn.Module
    tf: str  # "module:function"; function(num_classes, image_size) -> keras.Model
    workload: Workload = IMAGES
    batch_norm: bool = False  # per-rank batch statistics: bench verify cannot compare it with one process
    default_classes: int = 1000  # class count, or the vocabulary of a text model
    default_seq_len: int | None = None  # text models only
    per_class: int | None = None  # parameters per class when not a biased head (a tied embedding: d_model)
    sparse_embeddings: bool = False  # builders take embedding='tied'|'untied'|'sparse' (--sparse-embeddings)

    def parameters(self, num_classes: int = 1000, untied: bool = False) -> int:
        """Trainable parameters at ``num_classes`` (each head: inputs x classes weights + classes biases; a tied
        embedding: d_model per vocabulary entry; ``untied``: plus the output projection, d_model x vocabulary)."""
        per_class = self.per_class if self.per_class is not None else sum(i + 1 for i in self.head_inputs)
        extra = per_class * num_classes if untied else 0
        return self.params_1000 + per_class * (num_classes - 1000) + extra

    def gradient_bytes(self, num_classes: int = 1000, bytes_per_element: int = 4, untied: bool = False) -> int:
        """What one data-parallel step allreduces: every parameter's gradient (fp32: 4 bytes, fp16: 2)."""
        return self.parameters(num_classes, untied) * bytes_per_element

    def build_torch(self, num_classes: int, embedding: str = "tied"):
        return _function(self.torch)(num_classes, **self._embedding(embedding))

    def build_tf(self, num_classes: int, image_size: int, embedding: str = "tied"):
        return _function(self.tf)(num_classes, image_size, **self._embedding(embedding))

    def check_embedding(self, sparse_embeddings: bool, sparse_as_dense: bool = False) -> None:
        """--sparse-embeddings and --sparse-as-dense against this model (runs, verify and the builders ask here)."""
        if sparse_embeddings and not self.sparse_embeddings:
            raise BenchError(f"--sparse-embeddings applies to models with a token embedding (transformer-*); "
                             f"{self.name} has none")
        if sparse_as_dense and not sparse_embeddings:
            raise BenchError("--sparse-as-dense needs --sparse-embeddings (without it the gradient is dense already)")

    def _embedding(self, embedding: str) -> dict:
        self.check_embedding(embedding != "tied")
        return {} if embedding == "tied" else {"embedding": embedding}

    def train_flops_per_sample(self, cfg) -> float | None:
        """Matmul and convolution FLOPs of one training step (forward + backward) per sample; None without
        PyTorch."""
        return _train_flops(self.name, cfg.image_size, cfg.seq_len, cfg.num_classes)


def _function(path: str):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def flops_cache_dir() -> Path | None:
    """Where counted FLOPs are kept (None: HVDBENCH_FLOPS_CACHE=off)."""
    if os.environ.get("HVDBENCH_FLOPS_CACHE", "").lower() in ("off", "0", "no"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hvdbench" / "flops"


def _flops_key(name: str, image_size: int | None, seq_len: int | None, num_classes: int) -> str | None:
    """What a count depends on, hashed; None without PyTorch (then nothing is counted, nor read from the cache)."""
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    h = hashlib.sha256(json.dumps([name, image_size, seq_len, num_classes, torch_version]).encode())
    for module in (model(name).torch.partition(":")[0], "bench.models.workloads"):
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin or not os.path.isfile(spec.origin):
            return None  # a builder whose source cannot be read: count it every time
        h.update(Path(spec.origin).read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=32)
def _train_flops(name: str, image_size: int | None, seq_len: int | None, num_classes: int) -> float | None:
    folder = flops_cache_dir()
    key = _flops_key(name, image_size, seq_len, num_classes) if folder is not None else None
    if key is not None:
        try:
            return float(json.loads((folder / f"{key}.json").read_text())["train_flops_per_sample"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    flops = count_train_flops(name, image_size, seq_len, num_classes)
    if key is not None and flops is not None:
        try:  # a cache: a disk that refuses it costs the next run a count, never this run its result
            folder.mkdir(parents=True, exist_ok=True)
            files.replace(folder / f"{key}.json", json.dumps(
                {"model": name, "image_size": image_size, "seq_len": seq_len, "num_classes": num_classes,
                 "train_flops_per_sample": flops}))
        except OSError:
            pass
    return flops


def count_train_flops(name: str, image_size: int | None, seq_len: int | None, num_classes: int) -> float | None:
    """Count the training FLOPs per sample with PyTorch's FlopCounterMode (module docstring); None without it.

    A process that has TensorFlow loaded never loads PyTorch: the two frameworks' native libraries are not built
    to share a process (PyPI's PyTorch brings Triton, whose library crashed TensorFlow ranks with SIGSEGV when
    loaded beside TensorFlow's), so such a process counts in a child interpreter: the PyTorch environment's, or
    its own where it holds PyTorch too."""
    torch_here = _importable("torch")
    if not torch_here or "tensorflow" in sys.modules:
        python = envs.interpreter("torch") or (sys.executable if torch_here else None)
        return count_in_torch_environment(name, image_size, seq_len, num_classes, python=python)
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from bench.models.torch_loss import loss_fn

    spec = model(name)
    batch = 2  # batch norm in training needs more than one value per channel
    cfg = SimpleNamespace(batch_size=batch, image_size=image_size, seq_len=seq_len, num_classes=num_classes, seed=0)
    with torch.device("meta"):
        net = spec.build_torch(num_classes)
        data, target = (t.to("meta") for t in spec.workload.torch_batch(cfg, 0))
    net.train()
    with FlopCounterMode(display=False) as counter:
        loss_fn(net(data), target).backward()
    return counter.get_total_flops() / batch


def _importable(name: str) -> bool:
    """Whether ``import name`` would find the module, without importing it."""
    if name in sys.modules:
        return sys.modules[name] is not None
    return importlib.util.find_spec(name) is not None


# Run in the PyTorch environment: the same count (and the same cache) as a PyTorch rank's.
_COUNT = ("import json, sys; from bench import plugins; plugins.load(); from bench.models import _train_flops; "
          "print(json.dumps(_train_flops(*json.loads(sys.argv[1]))))")


def count_in_torch_environment(name: str, image_size: int | None, seq_len: int | None, num_classes: int,
                               python: str | None = None, timeout_s: float = 300) -> float | None:
    """The count from a child interpreter that holds PyTorch (``python``: HVDBENCH_PYTHON_TORCH's, or this one's
    for a TensorFlow process); None where there is none or it cannot count."""
    if python is None:
        return None
    try:
        out = subprocess.run([*envs.python_command(python), "-c", _COUNT,
                              json.dumps([name, image_size, seq_len, num_classes])],
                             capture_output=True, text=True, timeout=timeout_s, check=True).stdout
        value = json.loads(out.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        print(f"warning: no FLOPs count for {name}: the PyTorch environment ({python}) could not count it",
              file=sys.stderr)
        return None
    return float(value) if value is not None else None


def describe_inputs(config: Shaped) -> str:
    """A run's input shape, from its config record, in its workload's words: '64x64', 'seq 32' (a model this
    installation does not know: its image size)."""
    spec = MODELS.get(config.model)
    if spec is None:
        return f"{config.image_size}x{config.image_size}"
    return spec.workload.describe(config)


MODELS: dict[str, ModelSpec] = {}


def register(spec: ModelSpec) -> ModelSpec:
    MODELS[spec.name] = spec
    return spec


def model(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise BenchError(f"unknown model '{name}' (choose from: {', '.join(MODELS)})") from None


for _spec in (
    ModelSpec("vgg16", "VGG-16 (13 conv + 3 FC, no batch norm)", 224, 32, 138_357_544, (4096,),
              "bench.models.torch_vgg:vgg16", "bench.models.tf_vgg:vgg16"),
    ModelSpec("vgg19", "VGG-19 (16 conv + 3 FC, no batch norm)", 224, 32, 143_667_240, (4096,),
              "bench.models.torch_vgg:vgg19", "bench.models.tf_vgg:vgg19"),
    ModelSpec("resnet50", "ResNet-50 v1.5 (stride in the 3x3 conv)", 224, 32, 25_557_032, (2048,),
              "bench.models.torch_resnet:resnet50", "bench.models.tf_resnet:resnet50", batch_norm=True),
    ModelSpec("resnet101", "ResNet-101 v1.5", 224, 32, 44_549_160, (2048,),
              "bench.models.torch_resnet:resnet101", "bench.models.tf_resnet:resnet101", batch_norm=True),
    ModelSpec("inception3", "Inception V3 with aux classifier (torchvision layout; the aux head needs >= 299)",
              299, 299, 27_161_264, (2048, 768),
              "bench.models.torch_inception:inception3", "bench.models.tf_inception:inception3", batch_norm=True),
    # He et al. 2016, section 4.2: the CIFAR-10 ResNet with n = 3 (20 layers), the small model convergence is
    # shown with on a CPU (269,722 parameters at 10 classes; the paper says 0.27 M).
    ModelSpec("resnet20", "ResNet-20 for CIFAR-size images (He et al. 2016; 3 stages of 3 basic blocks, 16-64 "
              "channels)", 32, 8, 334_072, (64,), "bench.models.torch_resnet:resnet20",
              "bench.models.tf_resnet:resnet20", batch_norm=True, default_classes=10),
    # Vaswani et al. 2017, base: 6 + 6 layers, d_model 512, 8 heads, d_ff 2048, a shared 37000-token BPE
    # vocabulary tied to the output. 63,082,496 parameters counted here (the paper's Table 3 says 65 M).
    ModelSpec("transformer-base", "Transformer-base (Vaswani et al. 2017), encoder-decoder, tied embeddings",
              None, None, 44_650_496, (), "bench.models.torch_transformer:transformer_base",
              "bench.models.tf_transformer:transformer_base", workload=SEQUENCES, default_classes=37000,
              default_seq_len=128, per_class=512, sparse_embeddings=True),
    ModelSpec("transformer-small", "the Transformer-base architecture at CPU-test size (2 + 2 layers, d_model 64)",
              None, None, 231_424, (), "bench.models.torch_transformer:transformer_small",
              "bench.models.tf_transformer:transformer_small", workload=SEQUENCES, default_classes=1000,
              default_seq_len=32, per_class=64, sparse_embeddings=True),
):
    register(_spec)
