"""DBLAST's latent mixture head over any base's block states (docs/dblast.md section 2).

    pi = softmax(W_pi h_0)                                   R components, from the anchor slot's state
    q_s(. | z) = softmax(U_s + Delta[s, z])                  U_s: the base's own scores at slot s
    Delta[s, z] = ((A h_s) * c_z) B^T                        A: d -> r, c_z in R^r, B: (V, r)

B starts at zero, so a fresh head drafts exactly like the base under it until trained. Drafting stays one base
pass; the head adds k * R * r * V multiply-adds. Shapes: n blocks, k slots, R components, r rank, V draft vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn

from ...registry import HeadModule
from .config import DBLASTHeadConfig
from .mixture import component_log_q


class LatentMixtureHead(HeadModule):
    def __init__(self, shape: DBLASTHeadConfig, base_config) -> None:
        super().__init__(shape, base_config)
        d, R, r = base_config.hidden_size, shape.mixture_components, shape.mixture_rank
        vocab = base_config.draft_vocab_size or base_config.vocab_size
        self.component_logits = nn.Linear(d, R)
        self.down = nn.Linear(d, r, bias=False)
        self.codes = nn.Parameter(torch.randn(R, r))
        self.up = nn.Linear(r, vocab, bias=False)

    def init_weights(self) -> None:
        nn.init.normal_(self.codes, std=1.0)
        nn.init.zeros_(self.up.weight)

    def forward(self, anchor_hidden: torch.Tensor, slot_hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(n, d) anchor and (n, k, d) slot states -> (n, R) log pi and (n, k, R, V) offsets."""
        dtype = self.down.weight.dtype
        log_pi = torch.log_softmax(self.component_logits(anchor_hidden.to(dtype)).float(), dim=-1)
        low = self.down(slot_hidden.to(dtype))[..., None, :] * self.codes  # (n, k, R, r)
        return log_pi, self.up(low)

    def mixture(self, hidden: torch.Tensor, unary: torch.Tensor, temperature: float = 1.0):
        """(n, R) log pi and (n, k, R, V) log q_s(. | z) of n blocks from (n, k + 1, d) states and (n, k, V) scores."""
        log_pi, offsets = self(hidden[:, 0], hidden[:, 1:])
        return log_pi, component_log_q(unary, offsets, temperature)


__all__ = ["LatentMixtureHead"]
