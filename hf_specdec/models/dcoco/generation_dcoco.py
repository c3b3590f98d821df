"""Drafting with a DCOCO drafter: the backbone's block pass, the corrector's scores, then the walk.

Plugs into both decoding loops like the plain block drafter: `propose` (argmax chains in transformers' loop),
`greedy_tree` (the walk's chain, or a best-first tree over the walk's conditional scores) and `sampled_tree`
(the sampled walk, whose exact candidate-restricted q goes to speculative sampling).
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessorList

from ...verification.processed import call_temperature
from ...verification.tree import DraftTree, conditional_best_first_tree
from ..block_drafter.generation_block_drafter import BlockDraftCandidateGenerator
from .modeling_dcoco import CorrectorScores
from .walk import conditional_log_probs, prefix_first_walk, sampled_walk


class DCOCOCandidateGenerator(BlockDraftCandidateGenerator):
    def corrector_scores(self, input_ids: torch.LongTensor, k: int) -> CorrectorScores:
        hidden, unary = self.block_states(input_ids, k)  # (k + 1, H), (k, Vd)
        anchor = self.embed(input_ids[0, -1:].to(self.embed.weight.device))[0]  # (H,)
        return self.drafter.corrector_scores(hidden, unary, anchor, self.embed)

    def propose(self, input_ids: torch.LongTensor, k: int):
        scores = self.corrector_scores(input_ids, k)
        picks = prefix_first_walk(scores.first, scores.nxt)  # (k,)
        return scores.ids.gather(1, picks[:, None]).T.to(input_ids.device), None  # (1, k)

    def greedy_tree(self, input_ids: torch.LongTensor, k: int, budget: int, topk: int) -> DraftTree:
        scores = self.corrector_scores(input_ids, k)
        if not budget:
            picks = prefix_first_walk(scores.first, scores.nxt)
            tree = DraftTree()
            for token in scores.ids.gather(1, picks[:, None])[:, 0].tolist():
                tree.add(token, len(tree) - 1)
            return tree
        width = min(topk, scores.ids.shape[1])
        logq, order = [], []
        for table in conditional_log_probs(scores.first, scores.nxt):  # (parents, K) per depth
            top = table.topk(width, dim=-1)
            logq.append(top.values)
            order.append(top.indices)
        ids = [scores.ids[d][order[d]] for d in range(k)]  # (parents, width) token ids per depth
        return conditional_best_first_tree(
            [t.tolist() for t in logq], [t.tolist() for t in ids], [t.tolist() for t in order], budget
        )

    def sampled_tree(
        self, input_ids: torch.LongTensor, k: int, branches: int, logits_processor: LogitsProcessorList | None
    ) -> DraftTree:
        scores = self.corrector_scores(input_ids, k)
        draws, q_cand = sampled_walk(scores.first, scores.nxt, call_temperature(logits_processor), branches)
        q = q_cand.new_zeros(k, self.vocab_size).scatter_(1, scores.ids, q_cand)  # (k, V) zero off the candidates
        return DraftTree.sampled_chain(scores.ids.gather(1, draws).tolist(), q.to(input_ids.device))


__all__ = ["DCOCOCandidateGenerator"]
