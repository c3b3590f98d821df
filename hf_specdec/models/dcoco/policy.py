"""The DCOCO drafter's policy for on-policy distillation: walks over each slot's top-Kc candidates.

q_s(. | c_{s-1}) = softmax(score(c_{s-1} -> .) / T) from the corrector's transition scores; branch 0 is the greedy
prefix-first walk, the others sampled walks, each slot conditioned on the branch's own predecessor
(docs/dcoco.md, docs/specopd.md section 4). q is dense over Vd (zero off a slot's candidates).
Letters: n anchors, M branches, k drafted tokens, Vd draft vocabulary, Kc candidates.
"""

from __future__ import annotations

import torch

from ..block_drafter.policy import BlockPolicy, sample_rows
from .walk import prefix_first_walk


class DCOCOPolicy(BlockPolicy):
    """Walks over each slot's top-Kc candidates; q_s(. | c_{s-1}) = softmax(score(c_{s-1} -> .) / T)."""

    def scores(self, hidden, logits, anchor_ids):
        """Per anchor: (candidate draft indices (k, Kc), first (Kc,), nxt (k-1, Kc, Kc)) from the corrector."""
        out = []
        anchor_embeds = self.embed(anchor_ids.to(self.embed.weight.device))  # (n, H)
        for i in range(hidden.shape[0]):
            s = self.drafter.corrector_scores(hidden[i], logits[i, 1:], anchor_embeds[i], self.embed)
            out.append((self.to_draft[s.ids], s.first, s.nxt))
        return out

    @torch.no_grad()
    def draw(self, scores, branches, rng):
        paths = []
        for cand, first, nxt in scores:
            picks = [prefix_first_walk(first, nxt)[None]]  # (1, k) the greedy walk
            if branches > 1:
                t = self.temperature
                choice = sample_rows(torch.softmax(first.float() / t, -1)[None], branches - 1, rng)[0]
                walk = [choice]
                for s in range(nxt.shape[0]):
                    choice = sample_rows(torch.softmax(nxt[s, choice].float() / t, -1), 1, rng)[:, 0]
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


__all__ = ["DCOCOPolicy"]
