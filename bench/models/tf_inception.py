"""Inception V3 with its auxiliary classifier, the twin of bench.models.torch_inception: the same layers and trainable
parameter count; its 3x3 average pools count the zero padding (PyTorch's count_include_pad=True).
"""

from __future__ import annotations

from bench.models.tf_layers import conv_bn
from bench.tfutil import import_tf

tf, keras = import_tf()
layers = keras.layers


def _bc(x, filters: int, kernel, stride: int = 1, padding: int | tuple = 0):
    """Inception's BasicConv2d: conv (no bias) + BN(eps 0.001) + ReLU."""
    return layers.ReLU()(conv_bn(x, filters, kernel, stride, padding, eps=1e-3))


def _avg3(x):
    return layers.AveragePooling2D(3, 1)(layers.ZeroPadding2D(1)(x))  # count_include_pad=True


def _max3(x):
    return layers.MaxPool2D(3, 2)(x)


def _inception_a(x, pool_features: int):
    b1 = _bc(x, 64, 1)
    b5 = _bc(_bc(x, 48, 1), 64, 5, padding=2)
    b3 = _bc(_bc(_bc(x, 64, 1), 96, 3, padding=1), 96, 3, padding=1)
    bp = _bc(_avg3(x), pool_features, 1)
    return layers.Concatenate()([b1, b5, b3, bp])


def _inception_b(x):
    b3 = _bc(x, 384, 3, 2)
    bd = _bc(_bc(_bc(x, 64, 1), 96, 3, padding=1), 96, 3, 2)
    return layers.Concatenate()([b3, bd, _max3(x)])


def _inception_c(x, c7: int):
    b1 = _bc(x, 192, 1)
    b7 = _bc(_bc(_bc(x, c7, 1), c7, (1, 7), padding=(0, 3)), 192, (7, 1), padding=(3, 0))
    bd = _bc(x, c7, 1)
    bd = _bc(bd, c7, (7, 1), padding=(3, 0))
    bd = _bc(bd, c7, (1, 7), padding=(0, 3))
    bd = _bc(bd, c7, (7, 1), padding=(3, 0))
    bd = _bc(bd, 192, (1, 7), padding=(0, 3))
    bp = _bc(_avg3(x), 192, 1)
    return layers.Concatenate()([b1, b7, bd, bp])


def _inception_d(x):
    b3 = _bc(_bc(x, 192, 1), 320, 3, 2)
    b7 = _bc(_bc(_bc(_bc(x, 192, 1), 192, (1, 7), padding=(0, 3)), 192, (7, 1), padding=(3, 0)), 192, 3, 2)
    return layers.Concatenate()([b3, b7, _max3(x)])


def _inception_e(x):
    b1 = _bc(x, 320, 1)
    b3 = _bc(x, 384, 1)
    b3 = layers.Concatenate()([_bc(b3, 384, (1, 3), padding=(0, 1)), _bc(b3, 384, (3, 1), padding=(1, 0))])
    bd = _bc(_bc(x, 448, 1), 384, 3, padding=1)
    bd = layers.Concatenate()([_bc(bd, 384, (1, 3), padding=(0, 1)), _bc(bd, 384, (3, 1), padding=(1, 0))])
    bp = _bc(_avg3(x), 192, 1)
    return layers.Concatenate()([b1, b3, bd, bp])


def _inception3(num_classes: int, size: int):
    inputs = keras.Input((size, size, 3))
    x = _bc(inputs, 32, 3, 2)
    x = _bc(x, 32, 3)
    x = _bc(x, 64, 3, padding=1)
    x = _max3(x)
    x = _bc(x, 80, 1)
    x = _bc(x, 192, 3)
    x = _max3(x)
    x = _inception_a(x, 32)
    x = _inception_a(x, 64)
    x = _inception_a(x, 64)
    x = _inception_b(x)
    for c7 in (128, 160, 160, 192):
        x = _inception_c(x, c7)
    aux = layers.AveragePooling2D(5, 3)(x)
    aux = _bc(_bc(aux, 128, 1), 768, 5)
    aux = layers.Dense(num_classes, dtype="float32")(layers.GlobalAveragePooling2D()(aux))
    x = _inception_e(_inception_e(_inception_d(x)))
    x = layers.Dropout(0.5)(layers.GlobalAveragePooling2D()(x))
    logits = layers.Dense(num_classes, dtype="float32")(x)
    return keras.Model(inputs, [logits, aux])


def inception3(num_classes: int, image_size: int):
    return _inception3(num_classes, image_size)
