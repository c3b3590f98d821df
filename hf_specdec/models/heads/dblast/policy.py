"""The DBLAST head's policy for on-policy distillation: z ~ pi, then every slot from q_s(. | z), on any base.

Branch 0 is the greedy component's argmax block; q along a branch is the mixture's exact conditional
q(x_s | x_<s) (posterior-weighted over components; docs/dblast.md, docs/specopd.md section 4). The mixture, the
draws and q are the decoding path's own functions (`mixture.py`), batched over anchors.
Letters: n anchors, M branches, k drafted tokens, Vd draft vocabulary, R components.
"""

from __future__ import annotations

import torch

from ...policy import BlockPolicy
from .mixture import greedy_block, mixture_conditionals, sample_blocks


class DBLASTPolicy(BlockPolicy):
    """Latent mixture: z ~ pi, x_s ~ q_s(. | z); q along a branch = the exact conditionals q(x_s | x_<s)."""

    def scores(self, hidden, logits, anchor_ids):
        return self.head.mixture(hidden, logits[:, 1:], self.temperature)  # (n, R), (n, k, R, Vd)

    @torch.no_grad()
    def draw(self, scores, branches, rng):
        log_pi, logq = scores
        greedy = greedy_block(log_pi, logq)[:, None]  # (n, 1, k)
        if branches == 1:
            return greedy
        return torch.cat([greedy, sample_blocks(log_pi, logq, branches - 1, rng)], dim=1)  # (n, M, k)

    def path_q(self, scores, tokens):
        log_pi, logq = scores
        return mixture_conditionals(log_pi, logq, tokens)  # (n, M, k, Vd)


__all__ = ["DBLASTPolicy"]
