"""ResNet-50, ResNet-101 (v1.5) and the CIFAR ResNet-20, the twins of bench.models.torch_resnet: the same layers and
trainable parameter counts.
"""

from __future__ import annotations

from bench.models.tf_layers import conv_bn
from bench.tfutil import import_tf

tf, keras = import_tf()
layers = keras.layers


def _bottleneck(x, planes: int, stride: int, downsample: bool):
    identity = x
    out = layers.ReLU()(conv_bn(x, planes, 1))
    out = layers.ReLU()(conv_bn(out, planes, 3, stride, padding=1))  # v1.5: stride in the 3x3
    out = conv_bn(out, planes * 4, 1)
    if downsample:
        identity = conv_bn(x, planes * 4, 1, stride)
    return layers.ReLU()(layers.Add()([out, identity]))


def _resnet(blocks: list[int], num_classes: int, size: int):
    inputs = keras.Input((size, size, 3))
    x = layers.ReLU()(conv_bn(inputs, 64, 7, 2, padding=3))
    x = layers.MaxPool2D(3, 2)(layers.ZeroPadding2D(1)(x))  # after ReLU, zero padding == -inf padding
    inplanes = 64
    for i, (planes, n) in enumerate(zip((64, 128, 256, 512), blocks, strict=True)):
        stride = 1 if i == 0 else 2
        x = _bottleneck(x, planes, stride, downsample=stride != 1 or inplanes != planes * 4)
        inplanes = planes * 4
        for _ in range(1, n):
            x = _bottleneck(x, planes, 1, downsample=False)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(num_classes, dtype="float32")(x))


def _cifar_block(x, inplanes: int, planes: int, stride: int):
    """ResNet-20's block, as the PyTorch twin: the shortcut that halves the size takes every other pixel and pads
    the new channels with zeros (option A)."""
    out = layers.ReLU()(conv_bn(x, planes, 3, stride, padding=1))
    out = conv_bn(out, planes, 3, padding=1)
    identity = x
    if stride != 1:
        identity = layers.Lambda(lambda t: t[:, ::stride, ::stride, :])(identity)
    if planes != inplanes:
        pad = planes - inplanes
        identity = layers.Lambda(lambda t: tf.pad(t, [[0, 0], [0, 0], [0, 0], [pad // 2, pad - pad // 2]]))(identity)
    return layers.ReLU()(layers.Add()([out, identity]))


def _cifar_resnet(n: int, num_classes: int, size: int):
    inputs = keras.Input((size, size, 3))
    x = layers.ReLU()(conv_bn(inputs, 16, 3, padding=1))
    inplanes = 16
    for i, planes in enumerate((16, 32, 64)):
        for j in range(n):
            x = _cifar_block(x, inplanes, planes, 2 if i and not j else 1)
            inplanes = planes
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(num_classes, dtype="float32")(x))


def resnet50(num_classes: int, image_size: int):
    return _resnet([3, 4, 6, 3], num_classes, image_size)


def resnet101(num_classes: int, image_size: int):
    return _resnet([3, 4, 23, 3], num_classes, image_size)


def resnet20(num_classes: int, image_size: int):
    return _cifar_resnet(3, num_classes, image_size)
