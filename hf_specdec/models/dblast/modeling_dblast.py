"""DBLAST drafter: a block drafter whose block distribution is a low-rank latent mixture (docs/dblast.md section 2).

    pi = softmax(W_pi h_0)                                   R components, from the anchor slot's hidden state
    q_s(. | z) = softmax(U_s + Delta[s, z])                  U_s: the drafter's own logits at slot s
    Delta[s, z] = ((A h_s) * c_z) B^T                        A: d -> r, c_z in R^r, B: (V, r)

B starts at zero, so a fresh head drafts exactly like its backbone until trained. Drafting stays one backbone
pass; the head adds k * R * r * V multiply-adds. Shapes: k slots, R components, r rank, V draft vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn

from ..block_drafter.modeling_block_drafter import BlockDrafter
from .configuration_dblast import DBLASTConfig


class LatentMixtureHead(nn.Module):
    def __init__(self, config: DBLASTConfig) -> None:
        super().__init__()
        d, R, r = config.hidden_size, config.mixture_components, config.mixture_rank
        vocab = config.draft_vocab_size or config.vocab_size
        self.component_logits = nn.Linear(d, R)
        self.down = nn.Linear(d, r, bias=False)
        self.codes = nn.Parameter(torch.randn(R, r))
        self.up = nn.Linear(r, vocab, bias=False)

    def forward(self, anchor_hidden: torch.Tensor, slot_hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., d) anchor and (..., k, d) slot hidden states -> (..., R) log pi and (..., k, R, V) offsets."""
        log_pi = torch.log_softmax(self.component_logits(anchor_hidden).float(), dim=-1)
        low = self.down(slot_hidden)[..., None, :] * self.codes  # (..., k, R, r)
        return log_pi, self.up(low)


class MixtureDraft:
    """What a mixture head adds to a drafter of any backbone (this folder's block drafter, or a PARD drafter in
    `models/pard_dblast`): the block's mixture. Needs `self.mixture_head`."""

    mixture_head: LatentMixtureHead

    def mixture(self, hidden: torch.Tensor, unary: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(R,) log pi and (k, R, V) log q_s(. | z) of one block from (k + 1, d) hidden states and (k, V) logits."""
        dtype = self.mixture_head.down.weight.dtype
        log_pi, offsets = self.mixture_head(hidden[0].to(dtype), hidden[1:].to(dtype))
        return log_pi, torch.log_softmax(unary.float()[:, None, :] + offsets.float(), dim=-1)


class DBLASTDrafter(MixtureDraft, BlockDrafter):
    """`BlockDrafter` + `LatentMixtureHead`. Build one from a trained block drafter with `from_block_drafter`."""

    config_class = DBLASTConfig

    def __init__(self, config: DBLASTConfig) -> None:
        super().__init__(config)
        self.mixture_head = LatentMixtureHead(config)
        self.post_init()
        nn.init.zeros_(self.mixture_head.up.weight)

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, LatentMixtureHead):
            nn.init.normal_(module.codes, std=1.0)
            nn.init.zeros_(module.up.weight)

    @classmethod
    def from_block_drafter(cls, drafter: BlockDrafter, **head_kwargs) -> DBLASTDrafter:
        """A DBLAST drafter with `drafter`'s weights as its backbone and a fresh head (drafting like the backbone)."""
        return cls.with_backbone(drafter, "mixture_head.", **head_kwargs)


__all__ = ["DBLASTDrafter", "LatentMixtureHead", "MixtureDraft"]
