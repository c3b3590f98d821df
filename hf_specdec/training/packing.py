"""Multi-anchor packing of training blocks (DFlash training recipe, docs/block_drafter.md section 3).

For one sequence of T tokens with target features for every row, n anchors a_1..a_n each form a block
`[x_a, MASK x (K-1)]` at positions a..a+K-1 whose slot k is labelled x_{a+k}. All blocks go through the drafter in
one pass: keys/values are `[context (T rows) | block_1 | ... | block_n]`, queries are the blocks only, and a query
of block b sees the context rows strictly before a_b plus every position of its own block (bidirectionally).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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


def block_attention_mask(anchors: torch.LongTensor, num_tokens: int, block_size: int, dtype) -> torch.Tensor:
    """(1, 1, n*K, T + n*K) additive mask: block b sees context rows < a_b and its own block."""
    n, K = len(anchors), block_size
    block_of_row = torch.arange(n).repeat_interleave(K)  # (n*K,)
    sees_context = torch.arange(num_tokens)[None, :] < anchors[block_of_row][:, None]  # (n*K, T)
    sees_block = block_of_row[:, None] == block_of_row[None, :]  # (n*K, n*K)
    allowed = torch.cat([sees_context, sees_block], dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


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
    offsets = torch.arange(K)
    pos = anchors[:, None] + offsets[None, :]  # (n, K)
    block_ids = torch.full(pos.shape, mask_token_id, dtype=torch.long)
    block_ids[:, 0] = ids[anchors]
    labels = torch.where(pos < T, source[pos.clamp(max=T - 1)], torch.full_like(pos, -100))
    labels[pos < loss_start] = -100
    labels[:, 0] = -100
    positions = torch.cat([torch.arange(T), pos.reshape(-1)])
    return PackedBlocks(block_ids.reshape(-1), positions, labels, block_attention_mask(anchors, T, K, dtype))


__all__ = ["PackedBlocks", "block_attention_mask", "pack_blocks", "sample_anchors"]
