"""Training blocks of one sequence: random anchors, and each anchor's block `[x_a, MASK x (K-1)]` with slot k labelled
x_{a+k} (DFlash training recipe, docs/block_drafter.md section 3). How a base runs its blocks is the base's
(`anchor_states`; the block drafter's packed layout: `models/block_drafter/packing.py`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..models.block_drafter.packing import block_attention_mask, block_inputs


@dataclass
class PackedBlocks:
    """One sequence's training blocks. n blocks of K slots, T context rows."""

    block_ids: torch.LongTensor  # (n*K,) anchor then mask ids
    positions: torch.LongTensor  # (T + n*K,) context positions then block positions
    labels: torch.LongTensor  # (n, K) -100 where unsupervised
    attention_mask: torch.Tensor  # (1, 1, n*K, T + n*K) additive: 0 keep, -inf-like block


def sample_anchors(
    num_tokens: int, loss_start: int, block_size: int, num_anchors: int, rng: torch.Generator
) -> torch.LongTensor:
    """(n,) sorted anchors a with a >= 1 (non-empty context), a + 1 >= loss_start and a + 1 < num_tokens."""
    low, high = max(1, loss_start - 1), num_tokens - 2
    if high < low:
        return torch.empty(0, dtype=torch.long)
    candidates = torch.arange(low, high + 1)
    pick = torch.randperm(len(candidates), generator=rng)[:num_anchors]
    return candidates[pick].sort().values


def pack_blocks(
    ids: torch.LongTensor,
    anchors: torch.LongTensor,
    block_size: int,
    mask_token_id: int,
    loss_start: int,
    dtype,
    next_tokens: torch.LongTensor | None = None,
) -> PackedBlocks:
    """Blocks, positions, labels and mask for `ids` (T,) at `anchors` (n,).

    Slot k of the block at a is labelled with the token at a+k: `ids[a+k]`, or with `next_tokens` (T,) given,
    the target's own greedy choice there, `next_tokens[a+k-1]`.
    """
    T, K = ids.shape[0], block_size
    source = ids if next_tokens is None else torch.cat([ids[:1], next_tokens[:-1]])  # source[p]: label at p
    pos = anchors[:, None] + torch.arange(K)[None, :]  # (n, K)
    labels = torch.where(pos < T, source[pos.clamp(max=T - 1)], torch.full_like(pos, -100))
    labels[pos < loss_start] = -100
    labels[:, 0] = -100
    block_ids, positions = block_inputs(ids, anchors, K, mask_token_id)
    return PackedBlocks(block_ids, positions, labels, block_attention_mask(anchors, T, K, dtype))


__all__ = ["PackedBlocks", "block_attention_mask", "pack_blocks", "sample_anchors"]
