"""The DBLAST drafter's policy for on-policy distillation: z ~ pi, then every slot from q_s(. | z).

Branch 0 is the greedy component's argmax block; q along a branch is the mixture's exact conditional
q(x_s | x_<s) (posterior-weighted over components; docs/dblast.md, docs/specopd.md section 4).
Letters: n anchors, M branches, k drafted tokens, Vd draft vocabulary, R components.
"""

from __future__ import annotations

import torch

from ..block_drafter.policy import BlockPolicy, sample_rows


class DBLASTPolicy(BlockPolicy):
    """Latent mixture: z ~ pi, x_s ~ q_s(. | z); q along a branch = the exact conditionals q(x_s | x_<s)."""

    def scores(self, hidden, logits, anchor_ids):
        log_pi, offsets = self.drafter.mixture_head(hidden[:, 0], hidden[:, 1:])  # (n, R), (n, k, R, Vd)
        unary = logits[:, 1:].float()[:, :, None]  # (n, k, 1, Vd)
        return log_pi.float(), torch.log_softmax((unary + offsets.float()) / self.temperature, dim=-1)

    @torch.no_grad()
    def draw(self, scores, branches, rng):
        log_pi, logq = scores  # (n, R), (n, k, R, V)
        n, k, R, V = logq.shape
        z0 = (log_pi + logq.amax(dim=-1).sum(dim=1)).argmax(dim=-1)  # (n,) greedy component
        greedy = logq[torch.arange(n), :, z0].argmax(dim=-1)[:, None]  # (n, 1, k)
        if branches == 1:
            return greedy
        z = sample_rows(log_pi.exp(), branches - 1, rng)  # (n, M-1)
        rows = logq.permute(0, 2, 1, 3)[torch.arange(n)[:, None], z]  # (n, M-1, k, V)
        samples = sample_rows(rows.exp().reshape(-1, V), 1, rng).view(n, branches - 1, k)
        return torch.cat([greedy, samples], dim=1)

    def path_q(self, scores, tokens):
        log_pi, logq = scores
        n, M, k = tokens.shape
        R = logq.shape[2]
        index = tokens[:, :, :, None, None].expand(n, M, k, R, 1)
        picked = logq[:, None].expand(n, M, k, R, -1).gather(4, index)[..., 0]  # (n, M, k, R) log q_s(x_s | z)
        before = torch.cumsum(picked, dim=2) - picked
        weights = torch.softmax(log_pi[:, None, None] + before, dim=-1)  # (n, M, k, R) posterior w_s(z)
        return torch.einsum("nmkr,nkrv->nmkv", weights, logq.exp())  # (n, M, k, Vd)


__all__ = ["DBLASTPolicy"]
