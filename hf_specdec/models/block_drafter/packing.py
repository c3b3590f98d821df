"""Multi-anchor packing of a block drafter's blocks (DFlash training recipe, docs/block_drafter.md section 3).

For one sequence of T tokens with target features for every row, n anchors a_1..a_n each form a block
`[x_a, MASK x (K-1)]` at positions a..a+K-1. All blocks go through the drafter in one pass: keys/values are
`[context (T rows) | block_1 | ... | block_n]`, queries are the blocks only, and a query of block b sees the context
rows strictly before a_b plus every position of its own block (bidirectionally).
"""

from __future__ import annotations

import torch


def block_inputs(
    ids: torch.LongTensor, anchors: torch.LongTensor, block_size: int, mask_token_id: int
) -> tuple[torch.LongTensor, torch.LongTensor]:
    """(n*K,) the blocks' ids (anchor, then masks) and (T + n*K,) positions (context, then blocks) for `ids` (T,)."""
    pos = anchors[:, None] + torch.arange(block_size)[None, :]  # (n, K)
    block_ids = torch.full(pos.shape, mask_token_id, dtype=torch.long)
    block_ids[:, 0] = ids[anchors]
    return block_ids.reshape(-1), torch.cat([torch.arange(ids.shape[0]), pos.reshape(-1)])


def block_attention_mask(anchors: torch.LongTensor, num_tokens: int, block_size: int, dtype) -> torch.Tensor:
    """(1, 1, n*K, T + n*K) additive mask: block b sees context rows < a_b and its own block."""
    n, K = len(anchors), block_size
    block_of_row = torch.arange(n).repeat_interleave(K)  # (n*K,)
    sees_context = torch.arange(num_tokens)[None, :] < anchors[block_of_row][:, None]  # (n*K, T)
    sees_block = block_of_row[:, None] == block_of_row[None, :]  # (n*K, n*K)
    allowed = torch.cat([sees_context, sees_block], dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


__all__ = ["block_attention_mask", "block_inputs"]
