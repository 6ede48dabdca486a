"""The Transformer, the twin of bench.models.torch_transformer: the same layers and trainable parameter count."""

from __future__ import annotations

import math

from bench.tfutil import import_tf

tf, keras = import_tf()
layers = keras.layers


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
