"""Grouping rows of different lengths so that padding them to one length wastes little.

A left-padded batch computes every row at the longest row's length: four prompts of 95, 105, 115 and 257 tokens
cost a forward over 4 x 257 = 1,028 positions for 572 real ones. On a compute-bound device (a CPU) a prefill or a
drafter catch-up then pays nearly twice its work; grouping rows of similar length and running one forward per
group pays only what the rows hold (plus what each extra forward costs to launch).
"""

from __future__ import annotations

import torch

WASTE = 0.125  # a group's padded positions may exceed its real ones by this share ...
SLACK = 64  # ... plus this many positions (a few padded slots cost less than one more forward)


def length_groups(lengths: list[int], waste: float = WASTE, slack: int = SLACK) -> list[list[int]]:
    """Indices into `lengths`, grouped so that padding each group to its longest row adds at most `waste` x its
    real positions + `slack`; groups ordered by length, indices within a group ascending by length."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if groups:
            group = groups[-1]
            real = sum(lengths[j] for j in group) + lengths[i]
            if (len(group) + 1) * lengths[i] <= (1 + waste) * real + slack:  # i is the longest so far: the padded width
                group.append(i)
                continue
        groups.append([i])
    return groups


def left_pad(x: torch.Tensor, width: int) -> torch.Tensor:
    """(B, heads, width, d) from a (B, heads, S, d) cache tensor: zeros on the left of dim 2."""
    missing = width - x.shape[2]
    return x if missing == 0 else torch.cat([x.new_zeros(*x.shape[:2], missing, x.shape[3]), x], dim=2)


__all__ = ["SLACK", "WASTE", "left_pad", "length_groups"]
