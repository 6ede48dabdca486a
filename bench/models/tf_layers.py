"""What the TensorFlow (tf-keras) twins of the PyTorch models share: torchvision's initialisation and the
convolution + batch norm block, padded as PyTorch pads (explicit ZeroPadding2D + 'valid', so stride-2 convolutions
pad symmetrically). Tensors are NHWC (TensorFlow's native layout; its CPU kernels support no other).
"""

from __future__ import annotations

from bench.tfutil import import_tf

tf, keras = import_tf()
layers = keras.layers


def kaiming_out():
    """He-normal over fan-out, as torchvision initialises convolutions (a new instance per layer)."""
    return keras.initializers.VarianceScaling(2.0, mode="fan_out", distribution="untruncated_normal")


def conv_bn(x, filters: int, kernel, stride: int = 1, padding: int | tuple = 0, eps: float = 1e-5):
    """Conv (no bias) + BatchNorm, PyTorch padding semantics (symmetric, explicit)."""
    if padding:
        x = layers.ZeroPadding2D(padding)(x)
    x = layers.Conv2D(filters, kernel, stride, padding="valid", use_bias=False, kernel_initializer=kaiming_out())(x)
    return layers.BatchNormalization(epsilon=eps, momentum=0.9)(x)
