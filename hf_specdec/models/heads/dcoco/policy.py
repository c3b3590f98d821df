"""The DCOCO head's policy for on-policy distillation: walks over each slot's top-Kc candidates, on any base.

q_s(. | c_{s-1}) = softmax(score(c_{s-1} -> .) / T) from the corrector's transition scores; branch 0 is the greedy
prefix-first walk, the others sampled walks, each slot conditioned on the branch's own predecessor
(docs/dcoco.md, docs/specopd.md section 4). The scores, the walks and q are the decoding path's own functions
(`ContextualCorrector.scores`, `walk.py`), batched over anchors. q is dense over Vd (zero off a slot's candidates).
Letters: n anchors, M branches, k drafted tokens, Vd draft vocabulary, Kc candidates.
"""

from __future__ import annotations

import torch

from ...policy import BlockPolicy
from .walk import prefix_first_walk, sampled_walks, walk_q


class DCOCOPolicy(BlockPolicy):
    """Walks over each slot's top-Kc candidates; q_s(. | c_{s-1}) = softmax(score(c_{s-1} -> .) / T)."""

    def scores(self, hidden, logits, anchor_ids):
        """The corrector's `CorrectorScores` of every anchor's block."""
        return self.head.scores(hidden, logits[:, 1:], anchor_ids, self.embed, self.drafter.draft_vocab)

    @torch.no_grad()
    def draw(self, scores, branches, rng):
        picks = prefix_first_walk(scores.first, scores.nxt)[:, None]  # (n, 1, k) the greedy walk
        if branches > 1:
            sampled, _ = sampled_walks(scores.first, scores.nxt, self.temperature, branches - 1, rng)
            picks = torch.cat([picks, sampled], dim=1)  # (n, M, k)
        return self.candidate_tokens(scores, picks)

    def candidate_tokens(self, scores, picks: torch.LongTensor) -> torch.LongTensor:
        """(n, M, k) draft-vocabulary indices of the candidates `picks` (n, M, k) names."""
        n, M, k = picks.shape
        return scores.index[:, None].expand(n, M, k, -1).gather(3, picks[..., None])[..., 0]

    def path_q(self, scores, tokens):
        n, M, k = tokens.shape
        index = scores.index[:, None].expand(n, M, k, -1)  # (n, M, k, Kc)
        picks = (index == tokens[..., None]).float().argmax(-1)  # (n, M, k) candidate index of each token
        q_cand = walk_q(scores.first, scores.nxt, picks, self.temperature)  # (n, M, k, Kc)
        vocab = self.vocab_size()
        return q_cand.new_zeros(n, M, k, vocab).scatter(3, index, q_cand)  # (n, M, k, Vd)


__all__ = ["DCOCOPolicy"]
