"""Dependent sampled chains from the drafter's base LM (`DecodingSettings.sampled_base_drafts`).

A PARD adapter is trained on the target's argmax, so near T=1 its q is sharper than the target's p and overlaps it
less than the base LM it was adapted from (docs/verification.md 1.4). The base LM is a causal LM of the same
tokenizer, so a chain of single-token passes over it has an exact q per draft: its conditional given the committed
tokens and the drafts before. Per block (T committed tokens, the anchor last):

1) feed the committed tokens the base LM's own cache lacks (anchor included): its output at the anchor scores draft 1;
2) draw draft d from q_d (the processed conditional, with the drafter's head rows); feed it for draft d + 1; stop
   after k drafts or after a draft whose q was below `sampled_base_stop` (one host read per pass);
3) crop the cache back to the T committed tokens.

The base LM keeps a cache of its own: it never reads the adapter's (their keys and values differ).
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from transformers import DynamicCache, LogitsProcessorList, PreTrainedModel

from ...verification.processed import probabilities, process_rows
from ...verification.tree import DraftTree


class BaseChain:
    """One generation's base-LM chains: the base LM, its cache, and the generator's scoring (head rows, vocabulary)."""

    def __init__(self, lm: PreTrainedModel, generator, stop: float) -> None:
        self.lm, self.generator, self.stop = lm, generator, stop
        self.decoder = lm.get_decoder()
        params = inspect.signature(self.decoder.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        self.cache = DynamicCache()

    def sampled_tree(
        self, input_ids: torch.LongTensor, k: int, branches: int, logits_processor: LogitsProcessorList | None
    ) -> DraftTree:
        """Up to `k` drafts of a dependent chain (steps 1-3 of the module docstring), `branches` i.i.d. draws per
        depth (the first continues the chain); the tree carries the q every node was drawn from."""
        g, T = self.generator, input_ids.shape[1]
        device = self.lm.device
        cached = self.cache.get_seq_length()
        feed = g.known(input_ids[:, cached:].to(device))  # (1, T - cached) tokens the cache lacks, anchor last
        ids, rows, picks = input_ids, [], []
        for d in range(k):
            # 1) / 2) one pass over what the cache lacks; its last output scores draft d + 1
            positions = torch.arange(cached, cached + feed.shape[1], device=device)[None]  # (1, fed)
            out = self.decoder(input_ids=feed, position_ids=positions, use_cache=True, **{self.cache_arg: self.cache})
            cached += feed.shape[1]
            hidden = out.last_hidden_state[:, -1]  # (1, H)
            scores = g.full_vocab_logits(F.linear(hidden, g.head_weight, g.head_bias))  # (1, V)
            scores = scores.float().to(input_ids.device)
            q_d = probabilities(process_rows(logits_processor, scores, lambda r, ids=ids: ids))  # (1, V)
            pick = torch.multinomial(q_d, branches, replacement=True)  # (1, branches)
            ids = torch.cat([ids, pick[:, :1]], dim=-1)
            rows.append(q_d)
            picks.append(pick)
            if d == k - 1 or (self.stop > 0 and float(q_d[0, pick[0, 0]]) < self.stop):
                break  # the last draft, or one the base LM doubts: no pass is paid after it
            feed = g.known(pick[:, :1].to(device))  # (1, 1) draft d + 1, fed for draft d + 2
        if cached > T:
            self.cache.crop(T - cached)  # 3) the committed tokens only
        return DraftTree.sampled_chain(torch.cat(picks).tolist(), torch.cat(rows))


__all__ = ["BaseChain"]
