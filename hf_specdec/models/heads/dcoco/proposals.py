"""Drafting with a DCOCO head over any base: the base's block states, the corrector's scores, then the walk.

`chain` is the walk's argmax chain (transformers' loop, and hf_specdec's with no tree), `greedy_tree` a best-first
tree over the walk's conditional scores, `sampled_tree` the sampled walk, whose exact candidate-restricted q goes to
speculative sampling. The base's generator is the seam: `block_states`, `embed`, `draft_vocab`, `full_vocab`.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessorList

from ....verification.processed import call_temperature
from ....verification.tree import DraftTree, conditional_best_first_tree
from .module import ContextualCorrector, CorrectorScores
from .walk import conditional_log_probs, prefix_first_walk, sampled_walks


class DCOCOProposals:
    def __init__(self, corrector: ContextualCorrector, generator) -> None:
        self.corrector, self.generator = corrector, generator

    def scores(self, input_ids: torch.LongTensor, k: int) -> CorrectorScores:
        g = self.generator
        hidden, unary = g.block_states(input_ids, k)  # (k + 1, H), (k, Vd)
        return self.corrector.scores(hidden[None], unary[None], input_ids[0, -1:], g.embed, g.draft_vocab)

    def chain(self, input_ids: torch.LongTensor, k: int) -> tuple[torch.LongTensor, None]:
        """(k,) the prefix-first walk's tokens (full-vocabulary ids); no per-depth log q (the walk's scores are
        not the drafter's probabilities)."""
        s = self.scores(input_ids, k)
        return s.ids[0].gather(1, prefix_first_walk(s.first, s.nxt)[0, :, None])[:, 0], None

    def greedy_tree(self, input_ids: torch.LongTensor, k: int, budget: int, topk: int) -> DraftTree:
        s = self.scores(input_ids, k)
        ids_table = s.ids[0]  # (k, K)
        width = min(topk, ids_table.shape[1])
        logq, order = [], []
        for table in conditional_log_probs(s.first[0], s.nxt[0]):  # (parents, K) per depth
            top = table.topk(width, dim=-1)
            logq.append(top.values)
            order.append(top.indices)
        ids = [ids_table[d][order[d]] for d in range(k)]  # (parents, width) token ids per depth
        return conditional_best_first_tree(
            [t.tolist() for t in logq], [t.tolist() for t in ids], [t.tolist() for t in order], budget
        )

    def sampled_tree(
        self, input_ids: torch.LongTensor, k: int, branches: int, logits_processor: LogitsProcessorList | None
    ) -> DraftTree:
        """The sampled walk; `branches - 1` siblings per depth, i.i.d. from the q the walk's token came from."""
        s = self.scores(input_ids, k)
        picks, q_cand = sampled_walks(s.first, s.nxt, call_temperature(logits_processor))  # (1, 1, k), (1, 1, k, K)
        q_cand = q_cand[0, 0]  # (k, K)
        draws = picks[0, 0, :, None]  # (k, 1)
        if branches > 1:
            draws = torch.cat([draws, torch.multinomial(q_cand, branches - 1, replacement=True)], dim=1)
        ids = s.ids[0]  # (k, K)
        q = q_cand.new_zeros(k, self.generator.vocab_size).scatter_(1, ids, q_cand)  # (k, V) zero off the candidates
        return DraftTree.sampled_chain(ids.gather(1, draws).tolist(), q.to(input_ids.device))


__all__ = ["DCOCOProposals"]
