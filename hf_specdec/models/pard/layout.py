"""PARD's packed training layout (docs/pard.md): one pass over a sequence's real tokens and mask copies.

One sequence of T tokens becomes one packed pass: the T real tokens (depth 0), then mask copies; the copy at slot t
and depth d has position t, its anchor is a = t - d, it sees the real tokens 0..a and the same anchor's copies at
depths 1..d. Two layouts:
- `conditional_drop_layout` (training the drafter): per depth a random share of the slots, each copy's chain of
  earlier masks kept;
- `block_layout` (training a head on a frozen drafter): every copy a chosen anchor's block needs, so that
  `PardDrafter.anchor_states` gives each anchor's block as the decoding loop sees it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PardLayout:
    """One packed PARD training pass (N = T real tokens + kept mask copies)."""

    depth: torch.LongTensor  # (N,) 0 for real tokens, d for a depth-d mask copy
    slot: torch.LongTensor  # (N,) position t of the element
    anchor: torch.LongTensor  # (N,) t - d: the last real token the element may see

    def input_ids(self, ids: torch.LongTensor, mask_token_id: int) -> torch.LongTensor:
        """(N,) real tokens at depth 0, the mask token elsewhere."""
        real = ids[self.slot.clamp(max=ids.shape[0] - 1)]  # mask copies may sit past the end (block_layout)
        return torch.where(self.depth == 0, real, torch.full_like(self.slot, mask_token_id))

    def allowed(self) -> torch.Tensor:
        """(N, N) element e may attend element f: a real token up to e's anchor, or a mask copy of e's anchor at a
        depth up to e's own."""
        e_anchor, e_depth = self.anchor[:, None], self.depth[:, None]
        f_real, f_anchor, f_depth = (self.depth == 0)[None], self.anchor[None], self.depth[None]
        real = f_real & (self.slot[None] <= e_anchor)
        masks = ~f_real & (f_anchor == e_anchor) & (f_depth <= e_depth)
        return real | masks

    def additive_mask(self, device, dtype) -> torch.Tensor:
        """(1, 1, N, N) `allowed` as an additive attention mask: 0 where allowed, the dtype's minimum elsewhere."""
        mask = torch.zeros(self.slot.shape[0], self.slot.shape[0], device=device)  # (N, N)
        mask.masked_fill_(~self.allowed().to(device), torch.finfo(mask.dtype).min)
        return mask[None, None].to(dtype)


def conditional_drop_layout(
    length: int, block_size: int, ratio: float, floor: float, rng: torch.Generator | None = None
) -> PardLayout:
    """The real tokens plus, per depth d = 1..K-1, round(T * max(ratio^d, floor)) mask copies drawn from the slots
    whose depth d-1 copy sits one slot earlier (ratio 1: every copy, PARD without conditional drop)."""
    slots = [torch.arange(length)]  # depth 0: every real token
    prev = torch.arange(length)
    for d in range(1, block_size):
        candidates = prev + 1
        candidates = candidates[candidates < length]
        keep = min(len(candidates), max(1, round(length * max(ratio**d, floor)))) if len(candidates) else 0
        if keep == 0:
            break
        chosen = candidates[torch.randperm(len(candidates), generator=rng)[:keep]].sort().values
        slots.append(chosen)
        prev = chosen
    depth = torch.cat([torch.full_like(s, d) for d, s in enumerate(slots)])
    slot = torch.cat(slots)
    return PardLayout(depth=depth, slot=slot, anchor=slot - depth)


def block_layout(length: int, anchors: torch.LongTensor, block_size: int) -> PardLayout:
    """The real tokens plus, per anchor a, mask copies at depths 1..K-2 (slots a+1..a+K-2): with the anchor's own
    output they give the K-1 outputs that predict drafts 1..K-1 of the block at a. Slots past the sequence's end
    are allowed (nothing reads their labels)."""
    depths = torch.arange(1, block_size - 1)  # (K-2,)
    copies = (anchors[:, None] + depths[None]).reshape(-1)  # (n*(K-2),)
    slot = torch.cat([torch.arange(length), copies])
    depth = torch.cat([torch.zeros(length, dtype=torch.long), depths.repeat(len(anchors))])
    return PardLayout(depth=depth, slot=slot, anchor=slot - depth)


def layout_features(features: torch.Tensor, layout: PardLayout) -> torch.Tensor:
    """(N, L*H) the injected target features of each element, from a sequence's (T, L*H) `features`: those of the
    token before its input (masks: the anchor's, as in decoding), zeros before the first token."""
    feats = torch.cat([features.new_zeros(1, features.shape[1]), features[:-1]])  # (T, L*H)
    return feats[torch.where(layout.depth == 0, layout.slot, layout.anchor)]


__all__ = ["PardLayout", "block_layout", "conditional_drop_layout", "layout_features"]
