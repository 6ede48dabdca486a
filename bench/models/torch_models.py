"""PyTorch model definitions, written here (no torchvision) to match torchvision's architectures.

Parameter counts at 1000 classes equal torchvision's (tests assert them). Every model ends in
adaptive average pooling before its classifier, so VGG and the ResNets accept any image size >= 32.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

_VGG_CFG = {
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}


class AdaptiveAvgPool(nn.Module):
    """``nn.AdaptiveAvgPool2d((n, n))`` written as two fixed averaging matrices, as the TensorFlow twin pools
    (bench.models.tf_models.AdaptiveAvgPool2D): output bin i averages rows floor(i*H/n) .. ceil((i+1)*H/n) - 1.
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


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)  # v1.5: stride here
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers: list[int], num_classes: int) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * 4, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * 4:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * 4, 1, stride=stride, bias=False),
                                       nn.BatchNorm2d(planes * 4))
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * 4
        layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class CifarBlock(nn.Module):
    """ResNet-20's basic block (He et al. 2016, section 4.2): two 3x3 conv + BN; a shortcut that halves the size
    takes every other pixel and pads the new channels with zeros (their option A: no parameters)."""

    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.stride, self.pad = stride, planes - inplanes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x[:, :, ::self.stride, ::self.stride] if self.stride != 1 else x
        if self.pad:
            identity = F.pad(identity, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(out + identity)


class CifarResNet(nn.Module):
    """The ResNet for CIFAR-size images of He et al. 2016 (6n + 2 layers; n = 3: ResNet-20, 0.27 M parameters at
    10 classes): a 3x3 conv of 16, three stages of n blocks at 16, 32, 64 channels, average pool, one FC."""

    def __init__(self, n: int, num_classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        blocks, inplanes = [], 16
        for i, planes in enumerate((16, 32, 64)):
            for j in range(n):
                blocks.append(CifarBlock(inplanes, planes, 2 if i and not j else 1))
                inplanes = planes
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class BasicConv2d(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, **kwargs) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)), inplace=True)


class InceptionA(nn.Module):
    def __init__(self, in_channels: int, pool_features: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(in_channels, 64, kernel_size=1)
        self.branch5x5_1 = BasicConv2d(in_channels, 48, kernel_size=1)
        self.branch5x5_2 = BasicConv2d(48, 64, kernel_size=5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(in_channels, 64, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, kernel_size=3, padding=1)
        self.branch_pool = BasicConv2d(in_channels, pool_features, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.branch1x1(x)
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        bp = self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b5, b3, bp], 1)


class InceptionB(nn.Module):
    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.branch3x3 = BasicConv2d(in_channels, 384, kernel_size=3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(in_channels, 64, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, kernel_size=3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3(x)
        bd = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([b3, bd, F.max_pool2d(x, kernel_size=3, stride=2)], 1)


class InceptionC(nn.Module):
    def __init__(self, in_channels: int, channels_7x7: int) -> None:
        super().__init__()
        c7 = channels_7x7
        self.branch1x1 = BasicConv2d(in_channels, 192, kernel_size=1)
        self.branch7x7_1 = BasicConv2d(in_channels, c7, kernel_size=1)
        self.branch7x7_2 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7_3 = BasicConv2d(c7, 192, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = BasicConv2d(in_channels, c7, kernel_size=1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = BasicConv2d(c7, 192, kernel_size=(1, 7), padding=(0, 3))
        self.branch_pool = BasicConv2d(in_channels, 192, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.branch1x1(x)
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        bd = self.branch7x7dbl_1(x)
        for layer in (self.branch7x7dbl_2, self.branch7x7dbl_3, self.branch7x7dbl_4, self.branch7x7dbl_5):
            bd = layer(bd)
        bp = self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b7, bd, bp], 1)


class InceptionD(nn.Module):
    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.branch3x3_1 = BasicConv2d(in_channels, 192, kernel_size=1)
        self.branch3x3_2 = BasicConv2d(192, 320, kernel_size=3, stride=2)
        self.branch7x7x3_1 = BasicConv2d(in_channels, 192, kernel_size=1)
        self.branch7x7x3_2 = BasicConv2d(192, 192, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7x3_3 = BasicConv2d(192, 192, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7x3_4 = BasicConv2d(192, 192, kernel_size=3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        b7 = self.branch7x7x3_4(self.branch7x7x3_3(self.branch7x7x3_2(self.branch7x7x3_1(x))))
        return torch.cat([b3, b7, F.max_pool2d(x, kernel_size=3, stride=2)], 1)


class InceptionE(nn.Module):
    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(in_channels, 320, kernel_size=1)
        self.branch3x3_1 = BasicConv2d(in_channels, 384, kernel_size=1)
        self.branch3x3_2a = BasicConv2d(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3_2b = BasicConv2d(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = BasicConv2d(in_channels, 448, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(448, 384, kernel_size=3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = BasicConv2d(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch_pool = BasicConv2d(in_channels, 192, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.branch1x1(x)
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        bd = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        bd = torch.cat([self.branch3x3dbl_3a(bd), self.branch3x3dbl_3b(bd)], 1)
        bp = self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b3, bd, bp], 1)


class InceptionAux(nn.Module):
    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        self.conv0 = BasicConv2d(in_channels, 128, kernel_size=1)
        self.conv1 = BasicConv2d(128, 768, kernel_size=5)
        self.fc = nn.Linear(768, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(self.conv0(F.avg_pool2d(x, kernel_size=5, stride=3)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1))


class Inception3(nn.Module):
    """Inception V3 as torchvision defines it (aux classifier on; training returns (logits, aux))."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.Conv2d_1a_3x3 = BasicConv2d(3, 32, kernel_size=3, stride=2)
        self.Conv2d_2a_3x3 = BasicConv2d(32, 32, kernel_size=3)
        self.Conv2d_2b_3x3 = BasicConv2d(32, 64, kernel_size=3, padding=1)
        self.maxpool1 = nn.MaxPool2d(kernel_size=3, stride=2)
        self.Conv2d_3b_1x1 = BasicConv2d(64, 80, kernel_size=1)
        self.Conv2d_4a_3x3 = BasicConv2d(80, 192, kernel_size=3)
        self.maxpool2 = nn.MaxPool2d(kernel_size=3, stride=2)
        self.Mixed_5b = InceptionA(192, pool_features=32)
        self.Mixed_5c = InceptionA(256, pool_features=64)
        self.Mixed_5d = InceptionA(288, pool_features=64)
        self.Mixed_6a = InceptionB(288)
        self.Mixed_6b = InceptionC(768, channels_7x7=128)
        self.Mixed_6c = InceptionC(768, channels_7x7=160)
        self.Mixed_6d = InceptionC(768, channels_7x7=160)
        self.Mixed_6e = InceptionC(768, channels_7x7=192)
        self.AuxLogits = InceptionAux(768, num_classes)
        self.Mixed_7a = InceptionD(768)
        self.Mixed_7b = InceptionE(1280)
        self.Mixed_7c = InceptionE(2048)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=0.5)
        self.fc = nn.Linear(2048, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.trunc_normal_(m.weight, mean=0.0, std=0.1, a=-2, b=2)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor):
        for name in ("Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "maxpool1", "Conv2d_3b_1x1",
                     "Conv2d_4a_3x3", "maxpool2", "Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a",
                     "Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e"):
            x = getattr(self, name)(x)
        aux = self.AuxLogits(x) if self.training else None
        x = self.Mixed_7c(self.Mixed_7b(self.Mixed_7a(x)))
        x = self.fc(self.dropout(torch.flatten(self.avgpool(x), 1)))
        return (x, aux) if self.training else x


def vgg16(num_classes: int) -> nn.Module:
    return VGG(_VGG_CFG["vgg16"], num_classes)


def vgg19(num_classes: int) -> nn.Module:
    return VGG(_VGG_CFG["vgg19"], num_classes)


def resnet50(num_classes: int) -> nn.Module:
    return ResNet([3, 4, 6, 3], num_classes)


def resnet101(num_classes: int) -> nn.Module:
    return ResNet([3, 4, 23, 3], num_classes)


def inception3(num_classes: int) -> nn.Module:
    return Inception3(num_classes)


def resnet20(num_classes: int) -> nn.Module:
    return CifarResNet(3, num_classes)


def loss_fn(output, target: torch.Tensor, smoothing: float = 0.0) -> torch.Tensor:
    """Cross-entropy (``smoothing``: label smoothing, (1 - e) x CE + e x the mean over classes of -log p); for
    Inception V3 in training, main + 0.4 * auxiliary (the paper's weighting); per token for the Transformer."""
    if isinstance(output, tuple):
        main, aux = output
        return (F.cross_entropy(main, target, label_smoothing=smoothing)
                + 0.4 * F.cross_entropy(aux, target, label_smoothing=smoothing))
    if output.dim() == 3:  # per-token logits (B, L, vocab): the mean over every target token
        return F.cross_entropy(output.flatten(0, 1), target.flatten(), label_smoothing=smoothing)
    return F.cross_entropy(output, target, label_smoothing=smoothing)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# -- Transformer (Vaswani et al. 2017, "Attention Is All You Need") --------------------------------------
class PositionalEncoding(nn.Module):
    """The paper's sinusoids, PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...); no parameters.

    The table is a cached constant, not a module buffer: DistributedDataParallel broadcasts every buffer
    from rank 0 before each forward pass, which for a 4096-position table would add d_model x 16 KiB
    (1 MiB for transformer-small, 8 MiB for transformer-base) to every step's traffic for nothing."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.d_model = d_model
        self._table: torch.Tensor | None = None

    def table(self, length: int, like: torch.Tensor) -> torch.Tensor:
        cached = self._table
        if cached is None or cached.shape[0] < length or cached.device != like.device:
            position = torch.arange(length, dtype=torch.float32, device=like.device)[:, None]
            div = torch.exp(torch.arange(0, self.d_model, 2, dtype=torch.float32, device=like.device)
                            * (-math.log(10000.0) / self.d_model))
            cached = torch.zeros(length, self.d_model, device=like.device)
            cached[:, 0::2] = torch.sin(position * div)
            cached[:, 1::2] = torch.cos(position * div)
            self._table = cached
        return cached[:length]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.table(x.shape[1], x)


class Attention(nn.Module):
    """Multi-head attention with separate q, k, v and output projections (each weight + bias)."""

    def __init__(self, d_model: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.attn_drop = nn.Dropout(dropout)  # on the attention weights (a module, so bench verify can zero it)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, causal: bool) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, -1, h, d // h).transpose(1, 2)

        out = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(memory)), split(self.v(memory)),
                                             dropout_p=self.attn_drop.p if self.training else 0.0,
                                             is_causal=causal)
        return self.o(out.transpose(1, 2).reshape(b, t, d))


class TransformerLayer(nn.Module):
    """Post-LN as in the paper: x = LN(x + Dropout(Sublayer(x))) for self-attention, (decoder) encoder
    attention, and the ReLU feed-forward."""

    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float, decoder: bool) -> None:
        super().__init__()
        self.self_attn = Attention(d_model, heads, dropout)
        self.cross_attn = Attention(d_model, heads, dropout) if decoder else None
        self.ff1, self.ff2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3 if decoder else 2))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        x = self.norms[0](x + self.drop(self.self_attn(x, x, causal=memory is not None)))
        if self.cross_attn is not None:
            x = self.norms[1](x + self.drop(self.cross_attn(x, memory, causal=False)))
        return self.norms[-1](x + self.drop(self.ff2(self.drop(F.relu(self.ff1(x))))))


class Transformer(nn.Module):
    """Encoder-decoder Transformer; source, target and output share one embedding matrix (the paper's
    weight tying), scaled by sqrt(d_model) on input. Input: token ids (B, 2, L), source then target input.

    ``embedding``: 'tied' (the paper), 'untied' (a separate output projection, vocab x d_model, no bias) or
    'sparse' (untied, and the embedding's gradient is a sparse tensor holding only the rows looked up).
    Tied, the output projection's gradient makes the whole matrix's gradient dense."""

    def __init__(self, vocab: int, d_model: int, heads: int, d_ff: int, layers: int, dropout: float = 0.1,
                 embedding: str = "tied") -> None:
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab, d_model, sparse=embedding == "sparse")
        nn.init.normal_(self.embedding.weight, 0, d_model ** -0.5)
        self.position = PositionalEncoding(d_model)
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.ModuleList(TransformerLayer(d_model, heads, d_ff, dropout, False) for _ in range(layers))
        self.decoder = nn.ModuleList(TransformerLayer(d_model, heads, d_ff, dropout, True) for _ in range(layers))
        for module in [*self.encoder.modules(), *self.decoder.modules()]:
            if isinstance(module, nn.Linear):  # as Keras's Dense starts (the TensorFlow twin): Glorot, zero bias
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)
        self.output = None
        if embedding != "tied":
            self.output = nn.Linear(d_model, vocab, bias=False)
            nn.init.normal_(self.output.weight, 0, d_model ** -0.5)

    def embed(self, vectors: torch.Tensor) -> torch.Tensor:
        """Looked-up embedding rows (B, L, d_model) scaled, with positions, into the first layer."""
        return self.drop(self.position(vectors * self.d_model ** 0.5))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.from_vectors(self.embedding(tokens[:, 0]), self.embedding(tokens[:, 1]))

    def from_vectors(self, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Logits from the source's and the target's looked-up rows: the model after its embedding lookup
        (torch-hybrid looks the rows up in a table sharded over the ranks)."""
        memory = self.embed(source)
        for layer in self.encoder:
            memory = layer(memory)
        x = self.embed(target)
        for layer in self.decoder:
            x = layer(x, memory)
        if self.output is not None:
            return self.output(x)
        return x @ self.embedding.weight.T  # logits over the vocabulary, (B, L, vocab)


def transformer_base(num_classes: int, embedding: str = "tied") -> nn.Module:
    """Transformer-base: 6 + 6 layers, d_model 512, 8 heads, d_ff 2048, dropout 0.1 (``num_classes`` is the
    vocabulary)."""
    return Transformer(num_classes, 512, 8, 2048, 6, embedding=embedding)


def transformer_small(num_classes: int, embedding: str = "tied") -> nn.Module:
    """The same architecture, small enough for CPU tests: 2 + 2 layers, d_model 64, 4 heads, d_ff 128."""
    return Transformer(num_classes, 64, 4, 128, 2, embedding=embedding)
