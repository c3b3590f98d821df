"""The drafter's own policy, as on-policy distillation needs it: draw branches, and give q along a branch.

One strategy class per drafter kind (methods.md section 5.4, step 4 and 6):
- block drafter (DFlash): q_s is prefix-independent; branch 0 is the argmax path, the others are samples of the
  per-slot q;
- DCOCO: candidate-restricted q_s(. | c_{s-1}) from the corrector's transition scores; branches are walks
  (greedy walk, then sampled walks), each slot conditioned on the branch's own predecessor;
- DBLAST: the mixture's exact conditionals q(x_s | x_<s) (posterior-weighted over components); branches draw a
  component, then every slot from it (branch 0: the greedy component's argmax block).

Every q is returned dense over the drafter's vocabulary Vd (zero off a DCOCO slot's candidates), at the training
temperature, with gradients; tokens are draft-vocabulary indices.
Letters: n anchors, M branches, k drafted tokens, Vd draft vocabulary, Kc DCOCO candidates, R components.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..correction.walk import prefix_first_walk
from ..drafting.modeling_block_drafter import BlockDrafter
from ..drafting.modeling_dblast import DBLASTDrafter
from ..drafting.modeling_dcoco import DCOCODrafter


def _sample_rows(probs: torch.Tensor, draws: int, generator: torch.Generator | None) -> torch.LongTensor:
    """(rows, draws) i.i.d. indices from each row of (rows, V) probabilities."""
    return torch.multinomial(probs.float(), draws, replacement=True, generator=generator)


class BlockPolicy:
    """q_s = softmax(U_s / T), the same for every branch."""

    def __init__(self, drafter: BlockDrafter, embed: nn.Module, temperature: float) -> None:
        self.drafter, self.embed, self.temperature = drafter, embed, temperature

    def scores(self, hidden: torch.Tensor, logits: torch.Tensor, anchor_ids: torch.LongTensor) -> torch.Tensor:
        """(n, k, Vd) log q_s from (n, K, H) block hidden states and (n, K, Vd) logits (anchor slot first)."""
        return torch.log_softmax(logits[:, 1:].float() / self.temperature, dim=-1)

    @torch.no_grad()
    def draw(self, scores: torch.Tensor, branches: int, generator: torch.Generator | None) -> torch.LongTensor:
        n, k, V = scores.shape
        greedy = scores.argmax(dim=-1)[:, None]  # (n, 1, k)
        if branches == 1:
            return greedy
        samples = _sample_rows(scores.exp().reshape(n * k, V), branches - 1, generator)  # (n*k, M-1)
        return torch.cat([greedy, samples.view(n, k, -1).transpose(1, 2)], dim=1)  # (n, M, k)

    def path_q(self, scores: torch.Tensor, tokens: torch.LongTensor) -> torch.Tensor:
        return scores.exp()[:, None].expand(-1, tokens.shape[1], -1, -1)  # (n, M, k, Vd)


class DCOCOPolicy(BlockPolicy):
    """Walks over each slot's top-Kc candidates; q_s(. | c_{s-1}) = softmax(score(c_{s-1} -> .) / T)."""

    def __init__(self, drafter: DCOCODrafter, embed: nn.Module, temperature: float, to_draft: torch.Tensor) -> None:
        super().__init__(drafter, embed, temperature)
        self.to_draft = to_draft  # (V,) full id -> draft-vocabulary index

    def scores(self, hidden, logits, anchor_ids):
        """Per anchor: (candidate draft indices (k, Kc), first (Kc,), nxt (k-1, Kc, Kc)) from the corrector."""
        out = []
        anchor_embeds = self.embed(anchor_ids.to(self.embed.weight.device))  # (n, H)
        for i in range(hidden.shape[0]):
            s = self.drafter.correction_scores(hidden[i], logits[i, 1:], anchor_embeds[i], self.embed)
            out.append((self.to_draft[s.ids], s.first, s.nxt))
        return out

    @torch.no_grad()
    def draw(self, scores, branches, generator):
        paths = []
        for cand, first, nxt in scores:
            picks = [prefix_first_walk(first, nxt)[None]]  # (1, k) the greedy walk
            if branches > 1:
                t = self.temperature
                choice = _sample_rows(torch.softmax(first.float() / t, -1)[None], branches - 1, generator)[0]
                walk = [choice]
                for s in range(nxt.shape[0]):
                    choice = _sample_rows(torch.softmax(nxt[s, choice].float() / t, -1), 1, generator)[:, 0]
                    walk.append(choice)
                picks.append(torch.stack(walk, dim=1))  # (M-1, k)
            index = torch.cat(picks)  # (M, k) candidate index per slot
            paths.append(cand.gather(1, index.T).T)  # (M, k) draft-vocabulary indices
        return torch.stack(paths)

    def path_q(self, scores, tokens):
        n, M, k = tokens.shape
        vocab = len(self.drafter.draft_vocab) if self.drafter.draft_vocab is not None else self.to_draft.shape[0]
        out = []
        for (cand, first, nxt), path in zip(scores, tokens, strict=True):
            index = (cand[None] == path[:, :, None]).float().argmax(-1)  # (M, k) candidate index of each token
            rows = [torch.softmax(first.float() / self.temperature, -1)[None].expand(M, -1)]
            for s in range(nxt.shape[0]):
                rows.append(torch.softmax(nxt[s, index[:, s]].float() / self.temperature, -1))  # (M, Kc)
            q_cand = torch.stack(rows, dim=1)  # (M, k, Kc)
            dense = q_cand.new_zeros(M, k, vocab).scatter(2, cand[None].expand(M, -1, -1), q_cand)
            out.append(dense)
        return torch.stack(out)  # (n, M, k, Vd)


class DBLASTPolicy(BlockPolicy):
    """Latent mixture: z ~ pi, x_s ~ q_s(. | z); q along a branch = the exact conditionals q(x_s | x_<s)."""

    def scores(self, hidden, logits, anchor_ids):
        log_pi, offsets = self.drafter.mixture_head(hidden[:, 0], hidden[:, 1:])  # (n, R), (n, k, R, Vd)
        unary = logits[:, 1:].float()[:, :, None]  # (n, k, 1, Vd)
        return log_pi.float(), torch.log_softmax((unary + offsets.float()) / self.temperature, dim=-1)

    @torch.no_grad()
    def draw(self, scores, branches, generator):
        log_pi, logq = scores  # (n, R), (n, k, R, V)
        n, k, R, V = logq.shape
        z0 = (log_pi + logq.amax(dim=-1).sum(dim=1)).argmax(dim=-1)  # (n,) greedy component
        greedy = logq[torch.arange(n), :, z0].argmax(dim=-1)[:, None]  # (n, 1, k)
        if branches == 1:
            return greedy
        z = _sample_rows(log_pi.exp(), branches - 1, generator)  # (n, M-1)
        rows = logq.permute(0, 2, 1, 3)[torch.arange(n)[:, None], z]  # (n, M-1, k, V)
        samples = _sample_rows(rows.exp().reshape(-1, V), 1, generator).view(n, branches - 1, k)
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


def policy_for(drafter: BlockDrafter, embed: nn.Module, temperature: float, to_draft: torch.Tensor) -> BlockPolicy:
    """The policy strategy of `drafter`'s kind."""
    if isinstance(drafter, DCOCODrafter):
        return DCOCOPolicy(drafter, embed, temperature, to_draft)
    if isinstance(drafter, DBLASTDrafter):
        return DBLASTPolicy(drafter, embed, temperature)
    return BlockPolicy(drafter, embed, temperature)


__all__ = ["BlockPolicy", "DBLASTPolicy", "DCOCOPolicy", "policy_for"]
