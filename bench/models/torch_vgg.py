"""VGG-16 and VGG-19 without batch norm (Simonyan & Zisserman 2015), as the Horovod paper ran them; torchvision's
layout (its parameter counts at 1000 classes, tests assert them), pooled adaptively so any image size >= 32 fits.
"""

from __future__ import annotations

import math

import torch
from torch import nn

_VGG_CFG = {
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}


class AdaptiveAvgPool(nn.Module):
    """``nn.AdaptiveAvgPool2d((n, n))`` written as two fixed averaging matrices, as the TensorFlow twin pools
    (bench.models.tf_vgg.AdaptiveAvgPool2D): output bin i averages rows floor(i*H/n) .. ceil((i+1)*H/n) - 1.
    The same numbers, and a backward that is a matmul: adaptive_avg_pool2d's CUDA backward has no deterministic
    kernel, so under bench verify's ``torch.use_deterministic_algorithms(True)`` VGG (7x7 bins) raised on a GPU.
    Where the input already has n x n (224-pixel images) it is the identity, as the pooling would be."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self._matrices: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    @staticmethod
    def matrix(n_out: int, n_in: int) -> torch.Tensor:
        m = torch.zeros(n_out, n_in)
        for i in range(n_out):
            start, end = (i * n_in) // n_out, math.ceil((i + 1) * n_in / n_out)
            m[i, start:end] = 1.0 / (end - start)
        return m

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        if (h, w) == (self.n, self.n):
            return x
        key = (h, w, x.device, x.dtype)
        if key not in self._matrices:
            self._matrices[key] = (self.matrix(self.n, h).to(x.device, x.dtype),
                                   self.matrix(self.n, w).to(x.device, x.dtype))
        ph, pw = self._matrices[key]
        return torch.einsum("ih,bchw,jw->bcij", ph, x, pw)


class VGG(nn.Module):
    def __init__(self, cfg: list, num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [nn.Conv2d(channels, v, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
                channels = v
        self.features = nn.Sequential(*layers)
        self.avgpool = AdaptiveAvgPool(7)
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(),
            nn.Linear(4096, num_classes),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))

def vgg16(num_classes: int) -> nn.Module:
    return VGG(_VGG_CFG["vgg16"], num_classes)


def vgg19(num_classes: int) -> nn.Module:
    return VGG(_VGG_CFG["vgg19"], num_classes)
