"""TensorFlow (tf-keras) twins of bench.models.torch_models: same layers, same trainable parameter counts.

Layouts follow PyTorch exactly where it changes the computation, not only the count:
stride-2 convolutions pad symmetrically as PyTorch does (explicit ZeroPadding2D + 'valid'),
Inception's 3x3 average pools count the zero padding (PyTorch's count_include_pad=True), and VGG
ends in an adaptive average pool with PyTorch's bin edges. Tensors are NHWC (TensorFlow's native
layout; its CPU kernels support no other), so VGG's first FC layer sees features in (H, W, C) order.
"""

from __future__ import annotations

import math

from bench.tfutil import import_tf

tf, keras = import_tf()
layers = keras.layers

_VGG_CFG = {
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}


def kaiming_out():
    """He-normal over fan-out, as torchvision initialises convolutions (a new instance per layer)."""
    return keras.initializers.VarianceScaling(2.0, mode="fan_out", distribution="untruncated_normal")


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


def _conv(x, filters: int, kernel, stride: int = 1, padding: int | tuple = 0, eps: float = 1e-5):
    """Conv (no bias) + BatchNorm, PyTorch padding semantics (symmetric, explicit)."""
    if padding:
        x = layers.ZeroPadding2D(padding)(x)
    x = layers.Conv2D(filters, kernel, stride, padding="valid", use_bias=False, kernel_initializer=kaiming_out())(x)
    return layers.BatchNormalization(epsilon=eps, momentum=0.9)(x)


def _bottleneck(x, planes: int, stride: int, downsample: bool):
    identity = x
    out = layers.ReLU()(_conv(x, planes, 1))
    out = layers.ReLU()(_conv(out, planes, 3, stride, padding=1))  # v1.5: stride in the 3x3
    out = _conv(out, planes * 4, 1)
    if downsample:
        identity = _conv(x, planes * 4, 1, stride)
    return layers.ReLU()(layers.Add()([out, identity]))


def _resnet(blocks: list[int], num_classes: int, size: int):
    inputs = keras.Input((size, size, 3))
    x = layers.ReLU()(_conv(inputs, 64, 7, 2, padding=3))
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
    out = layers.ReLU()(_conv(x, planes, 3, stride, padding=1))
    out = _conv(out, planes, 3, padding=1)
    identity = x
    if stride != 1:
        identity = layers.Lambda(lambda t: t[:, ::stride, ::stride, :])(identity)
    if planes != inplanes:
        pad = planes - inplanes
        identity = layers.Lambda(lambda t: tf.pad(t, [[0, 0], [0, 0], [0, 0], [pad // 2, pad - pad // 2]]))(identity)
    return layers.ReLU()(layers.Add()([out, identity]))


def _cifar_resnet(n: int, num_classes: int, size: int):
    inputs = keras.Input((size, size, 3))
    x = layers.ReLU()(_conv(inputs, 16, 3, padding=1))
    inplanes = 16
    for i, planes in enumerate((16, 32, 64)):
        for j in range(n):
            x = _cifar_block(x, inplanes, planes, 2 if i and not j else 1)
            inplanes = planes
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(num_classes, dtype="float32")(x))


def _bc(x, filters: int, kernel, stride: int = 1, padding: int | tuple = 0):
    """Inception's BasicConv2d: conv (no bias) + BN(eps 0.001) + ReLU."""
    return layers.ReLU()(_conv(x, filters, kernel, stride, padding, eps=1e-3))


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


def vgg16(num_classes: int, image_size: int):
    return _vgg(_VGG_CFG["vgg16"], num_classes, image_size)


def vgg19(num_classes: int, image_size: int):
    return _vgg(_VGG_CFG["vgg19"], num_classes, image_size)


def resnet50(num_classes: int, image_size: int):
    return _resnet([3, 4, 6, 3], num_classes, image_size)


def resnet101(num_classes: int, image_size: int):
    return _resnet([3, 4, 23, 3], num_classes, image_size)


def resnet20(num_classes: int, image_size: int):
    return _cifar_resnet(3, num_classes, image_size)


def inception3(num_classes: int, image_size: int):
    return _inception3(num_classes, image_size)


def per_example_loss(outputs, labels, smoothing: float = 0.0):
    """Cross-entropy per example (``smoothing``: label smoothing, (1 - e) x CE + e x the mean over classes of
    -log p, as PyTorch's); Inception V3: main + 0.4 x auxiliary (as the PyTorch twin)."""
    sparse = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)

    def ce(y, logits):
        if not smoothing:
            return sparse(y, logits)
        logp = tf.nn.log_softmax(tf.cast(logits, tf.float32))
        return (1 - smoothing) * sparse(y, logits) - smoothing * tf.reduce_mean(logp, axis=-1)

    if isinstance(outputs, (list, tuple)):
        return ce(labels, outputs[0]) + 0.4 * ce(labels, outputs[1])
    if len(outputs.shape) == 3:  # per-token logits: an example's loss is the mean over its tokens
        return tf.reduce_mean(ce(labels, outputs), axis=-1)
    return ce(labels, outputs)


def count_trainable(model) -> int:
    return int(sum(math.prod(v.shape) for v in model.trainable_variables))


# -- Transformer (the twin of bench.models.torch_models.Transformer) --------------------------------------
def _positional_encoding(length: int, d_model: int):
    position = tf.range(length, dtype=tf.float32)[:, None]
    div = tf.exp(tf.range(0, d_model, 2, dtype=tf.float32) * (-math.log(10000.0) / d_model))
    angles = position * div  # (length, d/2): sin on even, cos on odd features, interleaved
    return tf.reshape(tf.stack([tf.sin(angles), tf.cos(angles)], axis=-1), [length, d_model])


class _Attention(layers.Layer):
    def __init__(self, d_model: int, heads: int, dropout: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self.heads, self.d_model = heads, d_model
        self.q, self.k, self.v, self.o = (layers.Dense(d_model) for _ in range(4))
        self.drop = layers.Dropout(dropout)

    def call(self, x, memory, causal: bool, training=None):
        h, d = self.heads, self.d_model

        def split(y):
            b = tf.shape(y)[0]
            return tf.transpose(tf.reshape(y, [b, -1, h, d // h]), [0, 2, 1, 3])

        q, k, v = split(self.q(x)), split(self.k(memory)), split(self.v(memory))
        scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(d // h)
        if causal:  # masked out by selection, never by adding -1e9: in fp16 that is -inf, and 0 x -inf is NaN
            t = tf.shape(scores)[-1]
            keep = tf.cast(tf.linalg.band_part(tf.ones([t, t], tf.int8), -1, 0), tf.bool)
            scores = tf.where(keep, scores, tf.constant(scores.dtype.min, scores.dtype))
        weights = self.drop(tf.nn.softmax(scores, axis=-1), training=training)
        out = tf.transpose(tf.matmul(weights, v), [0, 2, 1, 3])
        return self.o(tf.reshape(out, [tf.shape(x)[0], -1, d]))


class _TransformerLayer(layers.Layer):
    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float, decoder: bool, **kwargs) -> None:
        super().__init__(**kwargs)
        self.self_attn = _Attention(d_model, heads, dropout)
        self.cross_attn = _Attention(d_model, heads, dropout) if decoder else None
        self.ff1, self.ff2 = layers.Dense(d_ff, activation="relu"), layers.Dense(d_model)
        self.norms = [layers.LayerNormalization(epsilon=1e-5) for _ in range(3 if decoder else 2)]
        self.drop = layers.Dropout(dropout)

    def call(self, x, memory=None, training=None):
        x = self.norms[0](x + self.drop(self.self_attn(x, x, memory is not None, training=training),
                                        training=training))
        if self.cross_attn is not None:
            x = self.norms[1](x + self.drop(self.cross_attn(x, memory, False, training=training), training=training))
        ff = self.ff2(self.drop(self.ff1(x), training=training))
        return self.norms[-1](x + self.drop(ff, training=training))


class Transformer(keras.Model):
    """Encoder-decoder Transformer, one embedding for source, target and output (tied). Input: token ids
    (B, 2, L), source then target input; output: logits (B, L, vocab).

    ``embedding`` 'untied' or 'sparse': a separate output projection (d_model x vocab, no bias). The lookup's
    gradient is then an ``IndexedSlices`` (only the rows looked up) either way; whether it stays sparse is the
    training step's choice (bench.modes.tf_common)."""

    def __init__(self, vocab: int, d_model: int, heads: int, d_ff: int, n_layers: int, dropout: float = 0.1,
                 embedding: str = "tied"):
        super().__init__()
        self.d_model = d_model
        self.embedding = layers.Embedding(vocab, d_model,
                                          embeddings_initializer=keras.initializers.RandomNormal(0, d_model ** -0.5))
        self.drop = layers.Dropout(dropout)
        self.encoder = [_TransformerLayer(d_model, heads, d_ff, dropout, False) for _ in range(n_layers)]
        self.decoder = [_TransformerLayer(d_model, heads, d_ff, dropout, True) for _ in range(n_layers)]
        self.output_projection = None if embedding == "tied" else layers.Dense(
            vocab, use_bias=False, kernel_initializer=keras.initializers.RandomNormal(0, d_model ** -0.5))

    def _embed(self, tokens, training):
        x = self.embedding(tokens) * math.sqrt(self.d_model)  # the compute dtype (bf16/fp16 under mixed precision)
        return self.drop(x + tf.cast(_positional_encoding(tf.shape(tokens)[1], self.d_model), x.dtype),
                         training=training)

    def call(self, tokens, training=None):
        memory = self._embed(tokens[:, 0], training)
        for layer in self.encoder:
            memory = layer(memory, training=training)
        x = self._embed(tokens[:, 1], training)
        for layer in self.decoder:
            x = layer(x, memory, training=training)
        if self.output_projection is not None:
            return self.output_projection(x)
        return tf.matmul(x, tf.cast(self.embedding.embeddings, x.dtype), transpose_b=True)


def _built_transformer(vocab: int, embedding: str, *dims) -> keras.Model:
    model = Transformer(vocab, *dims, embedding=embedding)
    model(tf.zeros([1, 2, 8], tf.int32))  # create the variables (they do not depend on the sequence length)
    return model


def transformer_base(num_classes: int, image_size: int | None = None, embedding: str = "tied"):
    """``num_classes`` is the vocabulary."""
    return _built_transformer(num_classes, embedding, 512, 8, 2048, 6)


def transformer_small(num_classes: int, image_size: int | None = None, embedding: str = "tied"):
    return _built_transformer(num_classes, embedding, 64, 4, 128, 2)
