"""Drafting with a DBLAST drafter: one backbone pass, the mixture head, then a dependent block.

Greedy: the most likely component's argmax block (a chain), or a best-first tree over that component's per-slot
top-k. Sampling: z ~ pi and the whole block from q(. | z) in parallel; acceptance gets each token's exact
conditional q(x_s | x_<s) under the mixture (`mixture.py` in this folder), scattered over the full vocabulary.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessorList

from ...verification.processed import call_temperature
from ...verification.tree import DraftTree, best_first_tree
from ..block_drafter.generation_block_drafter import BlockDraftCandidateGenerator
from .mixture import greedy_component, sample_block


class DBLASTCandidateGenerator(BlockDraftCandidateGenerator):
    def mixture(self, input_ids: torch.LongTensor, k: int, temperature: float = 1.0):
        """(R,) log pi and (k, R, Vd) log q_s(.|z) of the next block (component logits scaled by 1/temperature)."""
        hidden, unary = self.block_states(input_ids, k)  # (k + 1, H), (k, Vd)
        log_pi, logq = self.drafter.mixture(hidden, unary)
        if temperature != 1.0:
            logq = torch.log_softmax(logq / temperature, dim=-1)
        return log_pi, logq

    def _full_ids(self, index: torch.LongTensor) -> torch.LongTensor:
        return index if self.draft_vocab is None else self.draft_vocab[index]

    def propose(self, input_ids: torch.LongTensor, k: int):
        log_pi, logq = self.mixture(input_ids, k)
        block = logq[:, greedy_component(log_pi, logq)].argmax(dim=-1)  # (k,)
        return self._full_ids(block)[None].to(input_ids.device), None

    def greedy_tree(self, input_ids: torch.LongTensor, k: int, budget: int, topk: int) -> DraftTree:
        log_pi, logq = self.mixture(input_ids, k)
        rows = logq[:, greedy_component(log_pi, logq)]  # (k, Vd)
        top = rows.topk(min(topk if budget else 1, rows.shape[-1]), dim=-1)
        return best_first_tree(top.values.tolist(), self._full_ids(top.indices).tolist(), budget or k)

    def sampled_tree(
        self, input_ids: torch.LongTensor, k: int, branches: int, logits_processor: LogitsProcessorList | None
    ) -> DraftTree:
        log_pi, logq = self.mixture(input_ids, k, call_temperature(logits_processor))
        tokens, conditionals = sample_block(log_pi, logq, branches)  # (k, branches), (k, Vd)
        q = conditionals.new_zeros(k, self.vocab_size)
        q[:, self._full_ids(torch.arange(conditionals.shape[1], device=q.device))] = conditionals  # (k, V)
        return DraftTree.sampled_chain(self._full_ids(tokens).tolist(), q.to(input_ids.device))


__all__ = ["DBLASTCandidateGenerator"]
