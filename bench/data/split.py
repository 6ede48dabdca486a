"""One split of a dataset as its samples (bench.data.formats read them, the loaders take them)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bench.errors import BenchError


@dataclass
class Split:
    """One split of a dataset: images as ``paths`` (image files; None for in-memory data) or ``arrays`` (N x H x W
    x 3 uint8), with ``labels`` from 0; or ``tokens``, a flat array of token ids (memory-mapped) read as samples
    of ``seq_len`` (:meth:`sample`)."""
    labels: np.ndarray
    paths: list[str] | None = None
    arrays: np.ndarray | None = None
    shards: list[str] = field(default_factory=list)  # tfrecord: the shard files (samples counted in meta.json)
    tokens: np.ndarray | None = None
    seq_len: int = 0
    vocab: int = 0  # tokens: every id below it

    def __len__(self) -> int:
        if self.tokens is not None:  # sample i: tokens [2 L i, 2 L (i + 1)] (its last one only as a target)
            return max(0, (len(self.tokens) - 1) // (2 * self.seq_len))
        return len(self.labels)

    def __getstate__(self) -> dict:
        """Pickled for a loader's worker process (bench.data.loaders.worker_start): a memory-mapped token file by
        its path, so that a worker maps the same file instead of receiving a copy of it."""
        state = dict(self.__dict__)
        if isinstance(self.tokens, np.memmap) and self.tokens.filename:
            state["tokens"] = ("memmap", self.tokens.filename, self.tokens.dtype.str)
        return state

    def __setstate__(self, state: dict) -> None:
        tokens = state.get("tokens")
        if isinstance(tokens, tuple):
            state["tokens"] = np.memmap(tokens[1], dtype=np.dtype(tokens[2]), mode="r")
        self.__dict__.update(state)

    def sample(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """A token split's sample ``i``, as the text models train (bench.models.workloads.TokenSequences): the
        source (L tokens), the decoder's input (the next L), stacked (2, L), and the targets, the decoder's input
        one token on (L): a sequence and its continuation, cut from the flat file one after another."""
        n = self.seq_len
        window = np.asarray(self.tokens[2 * n * i:2 * n * (i + 1) + 1], np.int64)
        if self.vocab and window.max(initial=0) >= self.vocab:
            where = getattr(self.tokens, "filename", None) or "the token split"
            raise BenchError(f"{where} holds token id {window.max()} (sample {i}), outside the vocabulary "
                             f"0..{self.vocab - 1}")
        return np.stack([window[:n], window[n:2 * n]]), window[n + 1:]
