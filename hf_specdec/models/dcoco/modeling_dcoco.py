"""DCOCO drafter: a block drafter whose parallel draft is corrected by a small contextual scorer.

The backbone (`BlockDrafter`) drafts every slot in one pass, each without seeing the tokens chosen for the
other slots. The corrector keeps the top-K candidates per slot and scores every transition between candidates
of adjacent slots in one batched pass; a prefix-first walk (`walk.py` in this folder) then picks the draft.

Corrector (the published shape, 512 * d + 132,353 parameters; the design follows docs/dcoco.md section 2):
    candidate  c[s, j] = LayerNorm(P_tok(E[C_sj]) + P_hid(h_s))            width r = 128
    pair state g[s]    = P_L(h_s) + P_R(h_{s+1})                           width 128
    transition T[s,i,j] = MLP([c[s,i]; c[s+1,j]; g[s]; c[s,i] * c[s+1,j]])  512 -> 256 -> 1
    score(s, i -> j)   = log q_{s+1}(C_{s+1,j}) + T[s, i, j]
Slot 0 is the anchor (one candidate: the anchor token itself). E is the target's (frozen) input embedding table.

Shapes: k drafted slots, K candidates, d hidden, r candidate width, p pair width, m scorer hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..block_drafter.modeling_block_drafter import BlockDrafter
from .configuration_dcoco import DCOCOConfig


@dataclass
class CorrectorScores:
    """Candidates and transition scores of one drafted block."""

    ids: torch.LongTensor  # (k, K) candidate token ids per slot (full-vocabulary ids)
    first: torch.Tensor  # (K,) score of slot-1 candidates after the anchor
    nxt: torch.Tensor  # (k - 1, K, K) score of slot s+2 candidate j after slot s+1 candidate i


class ContextualCorrector(nn.Module):
    def __init__(self, config: DCOCOConfig) -> None:
        super().__init__()
        d, r, p, m = config.hidden_size, config.candidate_width, config.pair_width, config.scorer_hidden
        self.token_proj = nn.Linear(d, r)
        self.hidden_proj = nn.Linear(d, r)
        self.left_proj = nn.Linear(d, p)
        self.right_proj = nn.Linear(d, p)
        self.candidate_norm = nn.LayerNorm(r)
        self.scorer_in = nn.Linear(3 * r + p, m)
        self.scorer_out = nn.Linear(m, 1)
        self.widths = (r, r, p, r)

    def candidates(self, token_embeds: torch.Tensor, slot_hidden: torch.Tensor) -> torch.Tensor:
        """(k, K, d) candidate token embeddings and (k, d) slot hidden states -> (k, K, r).

        Matmuls run on contiguous 2-D inputs: torch's CPU bf16 kernels are far slower on 3-D and 4-D ones."""
        k, K, d = token_embeds.shape
        tokens = self.token_proj(token_embeds.reshape(k * K, d)).view(k, K, -1)
        return self.candidate_norm(tokens + self.hidden_proj(slot_hidden.contiguous())[:, None, :])

    def pair_states(self, hidden: torch.Tensor) -> torch.Tensor:
        """(S, d) hidden states of consecutive slots -> (S - 1, p) adjacent-pair states."""
        return self.left_proj(hidden[:-1]) + self.right_proj(hidden[1:])

    def transitions(self, prev: torch.Tensor, nxt: torch.Tensor, pair: torch.Tensor) -> torch.Tensor:
        """(n, I, r) predecessors, (n, J, r) successors, (n, p) pair states -> (n, I, J) transition scores.

        The first layer is linear in the concatenation, so only the elementwise-product term is computed per pair.
        """
        n, I, r = prev.shape
        J = nxt.shape[1]
        w_prev, w_next, w_pair, w_prod = self.scorer_in.weight.split(self.widths, dim=1)  # (m, .) each
        a = F.linear(prev.reshape(n * I, r), w_prev).view(n, I, 1, -1)  # (n, I, 1, m)
        b = F.linear(nxt.reshape(n * J, r), w_next).view(n, 1, J, -1)  # (n, 1, J, m)
        c = F.linear(pair.contiguous(), w_pair, self.scorer_in.bias).view(n, 1, 1, -1)  # (n, 1, 1, m)
        pairs = (prev[:, :, None, :] * nxt[:, None, :, :]).reshape(n * I * J, r)  # (n*I*J, r)
        ab = F.linear(pairs, w_prod).view(n, I, J, -1)  # (n, I, J, m)
        hidden = F.silu(a + b + c + ab).reshape(n * I * J, -1)
        return self.scorer_out(hidden).view(n, I, J)


class CorrectedDraft:
    """What a corrector adds to a drafter of any backbone (this folder's block drafter, or a PARD drafter in
    `models/pard_dcoco`): `corrector_scores` over one block. Needs `self.corrector`, `self.config`'s corrector
    shape and `self.draft_vocab`."""

    corrector: ContextualCorrector

    def corrector_scores(
        self, hidden: torch.Tensor, unary: torch.Tensor, anchor_embed: torch.Tensor, embed: nn.Module
    ) -> CorrectorScores:
        """Candidates and transition scores of one block.

        Args:
            hidden: (k + 1, d) drafter hidden states of the anchor and the k drafted slots.
            unary: (k, Vd) drafter scores of the drafted slots (draft vocabulary).
            anchor_embed: (d,) embedding of the anchor token (by `embed`).
            embed: the token embeddings candidates are read with (the target's for a block drafter).
        """
        k = unary.shape[0]
        K = min(self.config.corrector_candidates, unary.shape[-1])
        logq, index = unary.float().log_softmax(dim=-1).topk(K, dim=-1)  # (k, K) each
        ids = index if self.draft_vocab is None else self.draft_vocab.to(index.device)[index]
        dtype = self.corrector.token_proj.weight.dtype
        hidden = hidden.to(dtype)
        cand = self.corrector.candidates(embed(ids).to(dtype), hidden[1:])  # (k, K, r)
        anchor = self.corrector.candidates(anchor_embed.to(dtype)[None, None], hidden[:1])  # (1, 1, r)
        pairs = self.corrector.pair_states(hidden)  # (k, p)
        first = logq[0] + self.corrector.transitions(anchor, cand[:1], pairs[:1])[0, 0].float()  # (K,)
        if k == 1:
            return CorrectorScores(ids, first, logq.new_zeros(0, K, K))
        trans = self.corrector.transitions(cand[:-1], cand[1:], pairs[1:]).float()  # (k - 1, K, K)
        return CorrectorScores(ids, first, logq[1:, None, :] + trans)


class DCOCODrafter(CorrectedDraft, BlockDrafter):
    """`BlockDrafter` + `ContextualCorrector`. Build one from a trained block drafter with `from_block_drafter`."""

    config_class = DCOCOConfig

    def __init__(self, config: DCOCOConfig) -> None:
        super().__init__(config)
        self.corrector = ContextualCorrector(config)
        self.post_init()

    @classmethod
    def from_block_drafter(cls, drafter: BlockDrafter, **corrector_kwargs) -> DCOCODrafter:
        """A DCOCO drafter with `drafter`'s weights as its backbone and a fresh corrector."""
        return cls.with_backbone(drafter, "corrector.", **corrector_kwargs)


__all__ = ["ContextualCorrector", "CorrectedDraft", "CorrectorScores", "DCOCODrafter"]
