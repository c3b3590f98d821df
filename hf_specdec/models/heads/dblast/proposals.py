"""Drafting with a DBLAST head over any base: one base pass, the mixture head, then a dependent block.

Greedy: the most likely component's argmax block (`chain`), or a best-first tree over that component's per-slot
top-k. Sampling: z ~ pi and the whole block from q(. | z) in parallel; acceptance gets each token's exact
conditional q(x_s | x_<s) under the mixture (`mixture.py`), scattered over the full vocabulary.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessorList

from ....verification.processed import call_temperature, sample
from ....verification.tree import DraftTree, best_first_tree
from .mixture import greedy_component, mixture_conditionals, sample_blocks
from .module import LatentMixtureHead


class DBLASTProposals:
    def __init__(self, head: LatentMixtureHead, generator) -> None:
        self.head, self.generator = head, generator

    def mixture(self, input_ids: torch.LongTensor, k: int, temperature: float = 1.0):
        """(1, R) log pi and (1, k, R, Vd) log q_s(.|z) of the next block."""
        hidden, unary = self.generator.block_states(input_ids, k)  # (k + 1, H), (k, Vd)
        return self.head.mixture(hidden[None], unary[None], temperature)

    def greedy_rows(self, input_ids: torch.LongTensor, k: int) -> torch.Tensor:
        """(k, Vd) log q_s(. | z) of the greedy component."""
        log_pi, logq = self.mixture(input_ids, k)
        return logq[0, :, greedy_component(log_pi, logq)[0]]

    def chain(self, input_ids: torch.LongTensor, k: int) -> tuple[torch.LongTensor, torch.Tensor]:
        """(k,) the greedy component's argmax block (full ids) and (k,) its log q."""
        logq, index = self.greedy_rows(input_ids, k).max(dim=-1)
        return self.generator.full_ids(index), logq

    def greedy_tree(self, input_ids: torch.LongTensor, k: int, budget: int, topk: int) -> DraftTree:
        rows = self.greedy_rows(input_ids, k)  # (k, Vd)
        top = rows.topk(min(topk, rows.shape[-1]), dim=-1)
        return best_first_tree(top.values.tolist(), self.generator.full_ids(top.indices).tolist(), budget)

    def sampled_tree(
        self, input_ids: torch.LongTensor, k: int, branches: int, logits_processor: LogitsProcessorList | None
    ) -> DraftTree:
        """The sampled block; `branches - 1` siblings per depth, i.i.d. from the token's exact conditional."""
        log_pi, logq = self.mixture(input_ids, k, call_temperature(logits_processor))
        block = sample_blocks(log_pi, logq)  # (1, 1, k)
        conditionals = mixture_conditionals(log_pi, logq, block)[0, 0]  # (k, Vd)
        tokens = block[0, 0, :, None]  # (k, 1)
        if branches > 1:
            tokens = torch.cat([tokens, sample(conditionals, branches - 1)], dim=1)
        q = self.generator.full_vocab(conditionals, 0.0)  # (k, V)
        return DraftTree.sampled_chain(self.generator.full_ids(tokens).tolist(), q.to(input_ids.device))


__all__ = ["DBLASTProposals"]
