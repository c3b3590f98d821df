"""The block drafter's policy, as on-policy distillation needs it: draw branches, and give q along a branch.

q_s is prefix-independent (the block is drafted in one pass): branch 0 is the argmax path, the others are i.i.d.
samples of the per-slot q (docs/specopd.md section 4). Every q is returned dense over the drafter's vocabulary Vd,
at the training temperature, with gradients; tokens are draft-vocabulary indices. Both bases use it; the heads'
policies (DCOCO's, DBLAST's) subclass it and override `scores`, `draw` and `path_q`.
Letters: n anchors, M branches, k drafted tokens, Vd draft vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..verification.processed import sample
from .registry import head_of


class BlockPolicy:
    """q_s = softmax(U_s / T), the same for every branch."""

    def __init__(
        self, drafter: nn.Module, embed: nn.Module, temperature: float, to_draft: torch.Tensor | None = None
    ) -> None:
        self.drafter, self.embed, self.temperature = drafter, embed, temperature
        self.to_draft = to_draft  # (V,) full id -> draft-vocabulary index

    @property
    def head(self) -> nn.Module:
        """The drafter's head module (for a head's policy)."""
        return getattr(self.drafter, head_of(self.drafter).attr)

    def vocab_size(self) -> int:
        """Vd: the size of the drafter's draft vocabulary."""
        vocab = self.drafter.draft_vocab
        return len(vocab) if vocab is not None else self.to_draft.shape[0]

    def scores(self, hidden: torch.Tensor, logits: torch.Tensor, anchor_ids: torch.LongTensor) -> torch.Tensor:
        """(n, k, Vd) log q_s from (n, K, H) block hidden states and (n, K, Vd) logits (anchor slot first)."""
        return torch.log_softmax(logits[:, 1:].float() / self.temperature, dim=-1)

    @torch.no_grad()
    def draw(self, scores: torch.Tensor, branches: int, rng: torch.Generator | None) -> torch.LongTensor:
        n, k, V = scores.shape
        greedy = scores.argmax(dim=-1)[:, None]  # (n, 1, k)
        if branches == 1:
            return greedy
        samples = sample(scores.exp().float().reshape(n * k, V), branches - 1, rng)  # (n*k, M-1) i.i.d. per row
        return torch.cat([greedy, samples.view(n, k, -1).transpose(1, 2)], dim=1)  # (n, M, k)

    def path_q(self, scores: torch.Tensor, tokens: torch.LongTensor) -> torch.Tensor:
        return scores.exp()[:, None].expand(-1, tokens.shape[1], -1, -1)  # (n, M, k, Vd)


__all__ = ["BlockPolicy"]
