"""Training losses as pure functions of tensors."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def position_weights(block_size: int, gamma: float, device=None) -> torch.Tensor:
    """(K,) DFlash position decay (Chen et al. 2026, Eq. 4): w_0 = 0 (the anchor), w_k = exp(-(k-1)/gamma)."""
    k = torch.arange(block_size, device=device, dtype=torch.float32)
    weights = torch.exp(-(k - 1) / gamma)
    weights[0] = 0.0
    return weights


def dflash_decayed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, gamma: float) -> torch.Tensor:
    """Position-decayed cross-entropy of packed blocks.

    Args:
        logits: (n, K, V) drafter scores for n blocks of K positions.
        labels: (n, K) target tokens; -100 where a position has no label (the anchor slot, past the sequence end,
            or outside the supervised response).
        gamma: decay length; DFlash uses 7 for K=16, 5 for K=10, 4 for K=8.
    Returns:
        scalar: sum_k w_k * CE_k / sum_k w_k over labelled positions.
    """
    n, K, V = logits.shape
    ce = F.cross_entropy(logits.reshape(n * K, V).float(), labels.reshape(n * K), ignore_index=-100, reduction="none")
    weights = position_weights(K, gamma, logits.device).expand(n, K).reshape(-1) * (labels.reshape(-1) != -100)
    return (ce * weights).sum() / weights.sum().clamp_min(1e-8)


def dcoco_selection_loss(scores: torch.Tensor, target_index: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Teacher-forced candidate selection loss of the DCOCO corrector (methods.md section 3.3).

    Args:
        scores: (N, K) walk scores of a slot's K candidates given the true predecessor (unary + transition).
        target_index: (N,) index of the target's token among those candidates; -100 where it is not one of them
            (or the slot is unsupervised): such slots are skipped.
        weights: (N,) DFlash position weights of the slots.
    Returns:
        scalar: sum w * CE / sum w over the kept slots (0 when none is kept).
    """
    keep = target_index >= 0
    if not bool(keep.any()):
        return scores.sum() * 0.0
    ce = F.cross_entropy(scores[keep].float(), target_index[keep], reduction="none")
    w = weights[keep]
    return (ce * w).sum() / w.sum()


def default_gamma(block_size: int) -> float:
    """DFlash's suggested decay: about half the block (7 for 16, 5 for 10, 4 for 8)."""
    return float(max(1, math.ceil((block_size - 1) / 2)))


__all__ = ["default_gamma", "dflash_decayed_cross_entropy", "position_weights"]
