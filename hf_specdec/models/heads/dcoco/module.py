"""DCOCO's contextual corrector: a small scorer that re-ranks each drafted slot's top candidates by how well they fit
the candidates of the neighbouring slots, over any base's block states (docs/dcoco.md section 2).

The base drafts every slot in one pass, each without seeing the tokens chosen for the other slots. The corrector
keeps the top-K candidates per slot and scores every transition between candidates of adjacent slots in one batched
pass; a prefix-first walk (`walk.py`) then picks the draft.

Corrector (the published shape, 512 * d + 132,353 parameters):
    candidate  c[s, j] = LayerNorm(P_tok(E[C_sj]) + P_hid(h_s))            width r = 128
    pair state g[s]    = P_L(h_s) + P_R(h_{s+1})                           width 128
    transition T[s,i,j] = MLP([c[s,i]; c[s+1,j]; g[s]; c[s,i] * c[s+1,j]])  512 -> 256 -> 1
    score(s, i -> j)   = log q_{s+1}(C_{s+1,j}) + T[s, i, j]
Slot 0 is the anchor (one candidate: the anchor token itself). E is the base's token embedding (`embed` of its
generator: the target's for a block drafter, the LM's own for a PARD drafter); h_s the base's block states.

Shapes: n blocks, k drafted slots, K candidates, d hidden, r candidate width, p pair width, m scorer hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ...registry import HeadModule
from .config import DCOCOHeadConfig


@dataclass
class CorrectorScores:
    """Candidates and transition scores of n drafted blocks."""

    ids: torch.LongTensor  # (n, k, K) candidate token ids per slot (full-vocabulary ids)
    index: torch.LongTensor  # (n, k, K) the same candidates as draft-vocabulary indices
    first: torch.Tensor  # (n, K) score of slot-1 candidates after the anchor
    nxt: torch.Tensor  # (n, k - 1, K, K) score of slot s+2 candidate j after slot s+1 candidate i


class ContextualCorrector(HeadModule):
    def __init__(self, shape: DCOCOHeadConfig, base_config) -> None:
        super().__init__(shape, base_config)
        d, r, p, m = base_config.hidden_size, shape.candidate_width, shape.pair_width, shape.scorer_hidden
        self.candidates_kept = shape.corrector_candidates
        self.token_proj = nn.Linear(d, r)
        self.hidden_proj = nn.Linear(d, r)
        self.left_proj = nn.Linear(d, p)
        self.right_proj = nn.Linear(d, p)
        self.candidate_norm = nn.LayerNorm(r)
        self.scorer_in = nn.Linear(3 * r + p, m)
        self.scorer_out = nn.Linear(m, 1)
        self.widths = (r, r, p, r)

    def candidates(self, token_embeds: torch.Tensor, slot_hidden: torch.Tensor) -> torch.Tensor:
        """(S, K, d) candidate token embeddings and (S, d) slot hidden states -> (S, K, r).

        Matmuls run on contiguous 2-D inputs: torch's CPU bf16 kernels are far slower on 3-D and 4-D ones."""
        S, K, d = token_embeds.shape
        tokens = self.token_proj(token_embeds.reshape(S * K, d)).view(S, K, -1)
        return self.candidate_norm(tokens + self.hidden_proj(slot_hidden.contiguous())[:, None, :])

    def pair_states(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        """(S, d) states of slots and (S, d) of the slots after them -> (S, p) adjacent-pair states."""
        return self.left_proj(left.contiguous()) + self.right_proj(right.contiguous())

    def transitions(self, prev: torch.Tensor, nxt: torch.Tensor, pair: torch.Tensor) -> torch.Tensor:
        """(S, I, r) predecessors, (S, J, r) successors, (S, p) pair states -> (S, I, J) transition scores.

        The first layer is linear in the concatenation, so only the elementwise-product term is computed per pair.
        """
        S, I, r = prev.shape
        J = nxt.shape[1]
        w_prev, w_next, w_pair, w_prod = self.scorer_in.weight.split(self.widths, dim=1)  # (m, .) each
        a = F.linear(prev.reshape(S * I, r), w_prev).view(S, I, 1, -1)  # (S, I, 1, m)
        b = F.linear(nxt.reshape(S * J, r), w_next).view(S, 1, J, -1)  # (S, 1, J, m)
        c = F.linear(pair.contiguous(), w_pair, self.scorer_in.bias).view(S, 1, 1, -1)  # (S, 1, 1, m)
        pairs = (prev[:, :, None, :] * nxt[:, None, :, :]).reshape(S * I * J, r)  # (S*I*J, r)
        ab = F.linear(pairs, w_prod).view(S, I, J, -1)  # (S, I, J, m)
        hidden = F.silu(a + b + c + ab).reshape(S * I * J, -1)
        return self.scorer_out(hidden).view(S, I, J)

    def top_candidates(self, unary: torch.Tensor, draft_vocab: torch.Tensor | None):
        """(n, k, Vd) slot scores -> (n, k, K) log q of the top-K candidates, their draft indices and full ids."""
        K = min(self.candidates_kept, unary.shape[-1])
        logq, index = unary.float().log_softmax(dim=-1).topk(K, dim=-1)  # (n, k, K) each
        ids = index if draft_vocab is None else draft_vocab.to(index.device)[index]
        return logq, index, ids

    def scores(
        self, hidden: torch.Tensor, unary: torch.Tensor, anchor_ids: torch.LongTensor, embed: nn.Module, draft_vocab
    ) -> CorrectorScores:
        """Candidates and every transition score of n blocks (decoding: n = 1; on-policy training: n anchors).

        Args:
            hidden: (n, k + 1, d) the base's states of the anchor and the k drafted slots.
            unary: (n, k, Vd) the base's scores of the drafted slots (draft vocabulary).
            anchor_ids: (n,) the anchor tokens.
            embed: the base's token embeddings (candidates are read with it).
            draft_vocab: (Vd,) the ids the base scores, or None for the whole vocabulary.
        """
        n, k1, d = hidden.shape
        k = k1 - 1
        logq, index, ids = self.top_candidates(unary, draft_vocab)
        K = ids.shape[-1]
        dtype = self.token_proj.weight.dtype
        hidden = hidden.to(dtype)
        tokens = embed(ids.to(embed.weight.device)).to(device=hidden.device, dtype=dtype)  # (n, k, K, d)
        cand = self.candidates(tokens.view(n * k, K, d), hidden[:, 1:].reshape(n * k, d)).view(n, k, K, -1)
        anchor_embed = embed(anchor_ids.to(embed.weight.device)).to(device=hidden.device, dtype=dtype)  # (n, d)
        anchor = self.candidates(anchor_embed[:, None], hidden[:, 0])  # (n, 1, r)
        pairs = self.pair_states(hidden[:, :-1].reshape(n * k, d), hidden[:, 1:].reshape(n * k, d)).view(n, k, -1)
        first = logq[:, 0] + self.transitions(anchor, cand[:, 0], pairs[:, 0])[:, 0].float()  # (n, K)
        if k == 1:
            return CorrectorScores(ids, index, first, logq.new_zeros(n, 0, K, K))
        S = n * (k - 1)
        trans = self.transitions(
            cand[:, :-1].reshape(S, K, -1), cand[:, 1:].reshape(S, K, -1), pairs[:, 1:].reshape(S, -1)
        ).view(n, k - 1, K, K)
        return CorrectorScores(ids, index, first, logq[:, 1:, None, :] + trans.float())

    def teacher_forced_scores(
        self, hidden: torch.Tensor, logq: torch.Tensor, ids: torch.LongTensor, prev_ids: torch.LongTensor, embed
    ) -> torch.Tensor:
        """(n, k, K) scores of each slot's candidates after the TRUE token before it (training the corrector):
        the same candidates, pair states and transitions as `scores`, with the predecessor a real token.

        hidden: (n, k + 1, d) states; logq, ids: (n, k, K) from `top_candidates`; prev_ids: (n, k) the token before
        each slot (the anchor for slot 1)."""
        n, k, K = ids.shape
        d, N = hidden.shape[-1], n * k
        cand = self.candidates(embed(ids).to(hidden.dtype).view(N, K, d), hidden[:, 1:].reshape(N, d))
        pred = self.candidates(embed(prev_ids).to(hidden.dtype).view(N, 1, d), hidden[:, :-1].reshape(N, d))
        pairs = self.pair_states(hidden[:, :-1].reshape(N, d), hidden[:, 1:].reshape(N, d))
        return (logq.reshape(N, K) + self.transitions(pred, cand, pairs)[:, 0].float()).view(n, k, K)


__all__ = ["ContextualCorrector", "CorrectorScores"]
