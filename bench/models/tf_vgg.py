"""VGG-16 and VGG-19 without batch norm, the twin of bench.models.torch_vgg: the same layers and trainable parameter
count, ending in an adaptive average pool with PyTorch's bin edges; NHWC, so the first FC layer sees features in
(H, W, C) order.
"""

from __future__ import annotations

import math

from bench.models.tf_layers import kaiming_out
from bench.tfutil import import_tf

tf, keras = import_tf()
layers = keras.layers

_VGG_CFG = {
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}


class AdaptiveAvgPool2D(layers.Layer):
    """PyTorch's AdaptiveAvgPool2d: output bin i averages rows floor(i*H/n) .. ceil((i+1)*H/n) - 1."""

    def __init__(self, output_size: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.output_size = output_size

    @staticmethod
    def _matrix(n_out: int, n_in: int):
        rows = []
        for i in range(n_out):
            start, end = (i * n_in) // n_out, math.ceil((i + 1) * n_in / n_out)
            rows.append([1.0 / (end - start) if start <= j < end else 0.0 for j in range(n_in)])
        return rows

    def build(self, input_shape) -> None:
        self._ph = tf.constant(self._matrix(self.output_size, int(input_shape[1])))
        self._pw = tf.constant(self._matrix(self.output_size, int(input_shape[2])))

    def call(self, x):
        return tf.einsum("ih,bhwc,jw->bijc", tf.cast(self._ph, x.dtype), x, tf.cast(self._pw, x.dtype))

    def get_config(self):
        return dict(super().get_config(), output_size=self.output_size)


def _vgg(cfg: list, num_classes: int, size: int):
    inputs = keras.Input((size, size, 3))
    x = inputs
    for v in cfg:
        if v == "M":
            x = layers.MaxPool2D(2, 2)(x)
        else:
            x = layers.Conv2D(v, 3, padding="same", activation="relu", kernel_initializer=kaiming_out())(x)
    x = layers.Flatten()(AdaptiveAvgPool2D(7)(x))
    def dense():
        return keras.initializers.RandomNormal(0.0, 0.01)

    x = layers.Dense(4096, activation="relu", kernel_initializer=dense())(x)
    x = layers.Dropout(0.5)(x)
    x = layers.Dense(4096, activation="relu", kernel_initializer=dense())(x)
    x = layers.Dropout(0.5)(x)
    outputs = layers.Dense(num_classes, kernel_initializer=dense(), dtype="float32")(x)
    return keras.Model(inputs, outputs)


def vgg16(num_classes: int, image_size: int):
    return _vgg(_VGG_CFG["vgg16"], num_classes, image_size)


def vgg19(num_classes: int, image_size: int):
    return _vgg(_VGG_CFG["vgg19"], num_classes, image_size)
