"""The Transformer of Vaswani et al. 2017 ("Attention Is All You Need"): encoder-decoder, the base configuration and a
CPU-size one, the token embedding tied to the output or untied (sparse-embedding studies).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


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
