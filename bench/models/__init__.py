"""Model registry. Specs are plain data (no framework import); builders live per framework."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    default_image_size: int
    min_image_size: int
    params_1000: int  # parameter count at 1000 classes (torchvision's figure for the same architecture)
    head_inputs: tuple[int, ...]  # inputs of each classifier layer whose width is the class count

    def parameters(self, num_classes: int = 1000) -> int:
        """Trainable parameters at ``num_classes`` (each head: inputs x classes weights + classes biases)."""
        return self.params_1000 + sum(i + 1 for i in self.head_inputs) * (num_classes - 1000)


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("vgg16", "VGG-16 (13 conv + 3 FC, no batch norm)", 224, 32, 138_357_544, (4096,)),
        ModelSpec("vgg19", "VGG-19 (16 conv + 3 FC, no batch norm)", 224, 32, 143_667_240, (4096,)),
        ModelSpec("resnet50", "ResNet-50 v1.5 (stride in the 3x3 conv)", 224, 32, 25_557_032, (2048,)),
        ModelSpec("resnet101", "ResNet-101 v1.5", 224, 32, 44_549_160, (2048,)),
        ModelSpec("inception3", "Inception V3 with aux classifier (torchvision layout; the aux head needs >= 299)",
                  299, 299, 27_161_264, (2048, 768)),
    )
}
