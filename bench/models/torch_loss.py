"""The loss every PyTorch mode trains with, and the parameter count the tests hold the models to."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


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
