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
    """Teacher-forced candidate selection loss of the DCOCO corrector (docs/dcoco.md section 5).

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


def expected_verified_length_loss(p: torch.Tensor, q: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """1 - E[accepted drafts] / k of chain speculative sampling along teacher prefixes (DBLAST objective; the
    E2E-TV form of docs/specopd.md section 3 and docs/dblast.md section 5).

    Args:
        p: (n, k, V) target probabilities at each drafted slot given the teacher prefix.
        q: (n, k, V) the draft's conditional probabilities there (for a mixture, the posterior-weighted ones).
        valid: (n, k) bool, False where the teacher prefix cannot be drafted (that slot and every later one count
            as rejected).
    Returns:
        scalar: 1 - mean over blocks of (1/k) sum_j prod_{s<=j} beta_s, beta_s = sum_v min(p_s(v), q_s(v)), the
        per-slot acceptance probability. When p_s and q_s do not depend on the prefix this is exactly 1 - E[A]/k.
    """
    beta = torch.minimum(p.float(), q.float()).sum(dim=-1)  # (n, k)
    if valid is not None:
        beta = beta * valid.cumprod(dim=1)
    return 1.0 - beta.cumprod(dim=1).mean()


def mixture_nll(log_pi: torch.Tensor, logq: torch.Tensor, tokens: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """-log sum_z pi_z prod_s q_s(x_s | z) of teacher blocks, per supervised slot (keeps components in use).

    Args:
        log_pi: (n, R); logq: (n, k, R, V); tokens: (n, k) draft-vocabulary ids (any value where invalid);
        valid: (n, k) bool, slots that count.
    """
    picked = logq.gather(3, tokens.clamp_min(0)[:, :, None, None].expand(-1, -1, logq.shape[2], 1))[..., 0]
    picked = picked * valid[..., None]  # (n, k, R) log q_s(x_s|z), 0 where not supervised
    joint = torch.logsumexp(log_pi + picked.sum(dim=1), dim=-1)  # (n,)
    return -joint.sum() / valid.sum().clamp_min(1)


def default_gamma(block_size: int) -> float:
    """About half the block, ceil((K - 1) / 2): 8 for 16 (DFlash sets 7 there), 5 for 10, 4 for 8."""
    return float(max(1, math.ceil((block_size - 1) / 2)))


__all__ = ["default_gamma", "dflash_decayed_cross_entropy", "position_weights"]
