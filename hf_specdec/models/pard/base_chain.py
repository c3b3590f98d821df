"""Dependent chains from the drafter's base LM: sampled (`DecodingSettings.sampled_base_drafts`) and greedy
(`greedy_base_drafts`, `BaseChain.greedy_chain`).

A PARD adapter is trained on the target's argmax, so near T=1 its q is sharper than the target's p and overlaps it
less than the base LM it was adapted from (docs/verification.md 1.4). The base LM is a causal LM of the same
tokenizer, so a chain of single-token passes over it has an exact q per draft: its conditional given the committed
tokens and the drafts before. With `sampled_base_branches = M > 1` a block holds M such chains, drawn i.i.d. and merged
where they agree (a trie): SpecInfer's multi-draft speculative sampling over whole branches. Per block (T committed
tokens, the anchor last):

1) feed the committed tokens the base LM's own cache lacks (anchor included): its output at the anchor scores the
   root's children;
2) at every open node v (the root first) that n chains pass through, draw n + L tokens i.i.d. from q_v (the
   processed conditional given v's path, with the drafter's head rows; with `sampled_base_topk` = K over its K most
   likely tokens, `top_probabilities`; L = `sample_branches` - 1); the distinct ones become v's children in order of
   first draw, child i carrying q_v without children 1..i-1, renormalised (`without_earlier`: given the draws before,
   the first new one is drawn from exactly that), and as many chains as drew it among the first n (none: a leaf,
   tried by the target if the children before it are rejected, never drafted on);
3) a child stays open unless it is a leaf, at depth k or its token had q_v below `sampled_base_stop` (with
   `sampled_base_stop_on="path"`: the product of q over its path, the root's children first; with "kept": the
   product over its path of the chance that the target keeps a draft of that q, as realized on this drafter's
   verified chains, `kept_by_q.py`); feed every open node
   in one pass (tree-masked once the chains part), repeat 2); one host read per pass;
4) crop the cache back to the T committed tokens.

Lossless: at each node the children are independent draws, each from the q it carries, given the path and the
siblings tried before it; how many there are depends only on draws already made (docs/verification.md 1.4).
The base LM keeps a cache of its own: it never reads the adapter's (their keys and values differ). With
`sampled_base_weights="int8"` its passes and head run through weight-only int8 copies (`models/int8_weights.py`);
with "auto" only passes up to the width they time faster at (`PardDrafter.base_int8_widest`): a one-token pass, but
not the prompt, which through int8 kernels made for one-token rows ran 2.5x slower than as loaded.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from transformers import DynamicCache, LogitsProcessorList, PreTrainedModel

from ...verification.processed import probabilities, process_rows, sample, top_probabilities
from ...verification.tree import DraftTree, mask_for_attention
from .kept_by_q import KeptByQ, kept_of


def without_earlier(q: torch.Tensor, tokens: list[int]) -> list[torch.Tensor]:
    """(V,) rows for distinct i.i.d. draws `tokens` from `q` (V,), in order of first draw: row i is q with tokens
    0..i-1 removed and renormalised, the law of the first draw that differs from those before it."""
    rows, q_i = [q], q
    for token in tokens[:-1]:
        q_i = q_i.clone()
        q_i[token] = 0.0
        q_i = q_i / q_i.sum()
        rows.append(q_i)
    return rows


class BaseChain:
    """One generation's base-LM chains: the base LM, its cache, and the generator's scoring (head rows, vocabulary)."""

    def __init__(
        self,
        lm: PreTrainedModel,
        generator,
        stop: float,
        topk: int = 0,
        int8: float = 0,
        stop_on: str = "draft",
    ) -> None:
        self.lm, self.generator, self.stop = lm, generator, stop
        self.stop_on = stop_on  # the stop compares the last draft's q ("draft"), the path's q product ("path") or
        # the product of its drafts' chances of being kept ("kept")
        # the last single chain: (the memory its stop read, each draft's q in order, the row's steps before it)
        self.last: tuple[KeptByQ, list[float], int] | None = None
        self.topk = topk  # q over each row's K most likely tokens (0: the whole processed row)
        g = generator
        # (decoder, head) for passes of at most `int8` tokens fed (the int8 copies), and for wider ones (as loaded)
        self.wide_decoder, self.wide_head = lm.get_decoder(), lambda h: F.linear(h, g.head_weight, g.head_bias)
        self.decoder, self.head, self.int8_widest = self.wide_decoder, self.wide_head, int8
        if int8 >= 1:
            quantized, head = g.drafter.int8_base(g.head_weight, g.head_bias)
            self.decoder, self.head = quantized.get_decoder(), head
        params = inspect.signature(self.decoder.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        self.cache = DynamicCache()

    def sampled_tree(
        self,
        input_ids: torch.LongTensor,
        k: int,
        branches: int,
        logits_processor: LogitsProcessorList | None,
        leaves: int = 0,
    ) -> DraftTree:
        """Up to `k` drafts deep, `branches` i.i.d. chains merged where they agree, and `leaves` more i.i.d. draws
        at every open node kept as leaves (steps 1-4 of the module docstring); the tree carries the q every node
        was drawn from."""
        g, T = self.generator, input_ids.shape[1]
        device = self.lm.device
        cached = self.cache.get_seq_length()
        feed = g.known(input_ids[:, cached:].to(device))  # (1, T - cached) tokens the cache lacks, anchor last
        positions = torch.arange(cached, T, device=device)[None]  # (1, T - cached)
        tree, rows, mask = DraftTree(), [], None
        kept = kept_of(g.drafter, logits_processor) if self.stop_on == "kept" else None
        chain_q: list[float] = []  # each draft's q, when the block is one chain
        slot = {-1: T - 1}  # node -> its cache slot (the root: the anchor's)
        opened = [(-1, branches, input_ids, 1.0)]  # (node, chains through it, its context (1, T + depth), path q)
        for d in range(k):
            # 1) / 3) one pass over what the cache lacks; its last len(opened) outputs score the open nodes' children
            scores = self._scores(feed, positions, mask, len(opened))  # (O, Vd)
            scores = g.full_vocab_logits(scores).float().to(input_ids.device)  # (O, V)
            q, ids, q_top = self._draft_rows(scores, logits_processor, opened)  # (O, V) q; its (O, K) ids and mass
            picks = sample(q_top, max(o[1] for o in opened) + leaves)  # (O, most chains + leaves)
            picked = torch.gather(q_top, 1, picks)  # (O, most chains + leaves) q of each draw, for the stop
            if ids is not None:
                picks = torch.gather(ids, 1, picks)  # (O, most chains + leaves) token ids
            draws, picked = picks.tolist(), picked.tolist()  # 2) the one host read of this pass
            nxt = []
            for r, (node, n, context, path_q) in enumerate(opened):
                counts = dict.fromkeys(draws[r][: n + leaves], 0)  # distinct draws in order of first draw
                for token in draws[r][:n]:
                    counts[token] += 1  # chains through it; 0: a leaf
                tokens = list(counts)
                for token, row in zip(tokens, without_earlier(q[r], tokens), strict=True):
                    rows.append(row)
                    child = tree.add(token, node, q_row=len(rows) - 1)
                    if not counts[token]:
                        continue  # a leaf: no chain drafts on from it
                    q_draw = picked[r][draws[r].index(token)]
                    chain_q.append(q_draw)
                    factor = kept.chance(q_draw) if kept is not None else q_draw
                    sure = q_draw if self.stop_on == "draft" else factor * path_q
                    if d < k - 1 and not (self.stop > 0 and sure < self.stop):
                        grown = torch.cat([context, context.new_tensor([[token]])], -1)
                        nxt.append((child, counts[token], grown, factor * path_q))
            if not nxt:
                break  # no open node: no pass is paid after the last drafts
            feed, positions, mask = self._next_pass(tree, nxt, slot, T, d, device)
            opened = nxt
        fed = self.cache.get_seq_length() - T  # drafts fed
        if fed:
            self.cache.crop(-fed)  # 4) the committed tokens only
        tree.q = torch.stack(rows) if rows else None  # (nodes, V): node i was drawn from row q_of[i]
        one_chain = kept is not None and branches == 1 and not leaves  # its drafts' verdicts are the row's count
        self.last = (kept, chain_q, g.stats.row_steps) if one_chain else None
        return tree

    def greedy_chain(self, input_ids: torch.LongTensor, k: int, stop: float) -> DraftTree:
        """Up to `k` argmax drafts of the base LM, one pass each, ending after the draft at which the product of the
        chain's q falls below `stop` (`DecodingSettings.greedy_base_drafts`): steps 1, 3 and 4 of the module
        docstring with one chain, step 2 its argmax. The tree is marked `whole`: its own stop chose its length."""
        g, T = self.generator, input_ids.shape[1]
        device = self.lm.device
        cached = self.cache.get_seq_length()
        feed = g.known(input_ids[:, cached:].to(device))  # (1, T - cached) tokens the cache lacks, anchor last
        positions = torch.arange(cached, T, device=device)[None]  # (1, T - cached)
        tree, path_q = DraftTree(whole=True), 1.0
        for d in range(k):
            logq, index = self._scores(feed, positions, None, 1).float().log_softmax(dim=-1).max(dim=-1)  # (1,) each
            token = g.full_ids(index)  # (1,) the draft in the target's ids
            q, token = torch.stack([logq.double().exp(), token.double()]).flatten().tolist()  # the pass's host read
            tree.add(int(token), d - 1)
            path_q *= q
            if d == k - 1 or path_q < stop:
                break  # no pass is paid after the last draft
            feed = g.known(torch.tensor([[int(token)]], device=device))  # (1, 1) draft d + 1
            positions = torch.tensor([[T + d]], device=device)  # (1, 1)
        fed = self.cache.get_seq_length() - T  # drafts fed
        if fed:
            self.cache.crop(-fed)  # 4) the committed tokens only
        return tree

    def learn(self, stats) -> None:
        """Step 2 of `kept_by_q.py` for the last chain, once the row's next step was its verification (`stats`:
        the row's `AcceptanceStats`)."""
        last, self.last = self.last, None
        if last is not None and stats.row_steps == last[2] + 1:
            last[0].learn(last[1], min(stats.accepted[-1], len(last[1])))

    def _scores(self, feed: torch.LongTensor, positions: torch.LongTensor, mask, n: int) -> torch.Tensor:
        """(n, Vd) head scores of the last `n` slots of one pass over `feed` (1, F) into the cache; passes of at most
        `int8_widest` tokens run through the int8 copies."""
        narrow = feed.shape[1] <= self.int8_widest
        decoder, head = (self.decoder, self.head) if narrow else (self.wide_decoder, self.wide_head)
        out = decoder(
            input_ids=feed, position_ids=positions, attention_mask=mask, use_cache=True, **{self.cache_arg: self.cache}
        )
        return head(out.last_hidden_state[0, -n:])  # (n, Vd)

    def _draft_rows(self, scores: torch.Tensor, logits_processor, opened: list) -> tuple:
        """(O, V) q of the open nodes' children as whole rows (what the tree carries), and what draws read: with
        `topk`, (O, K) the ids q lives on and (O, K) their q; without, None and q itself."""
        context_of = lambda r: opened[r][2]  # noqa: E731 (the row's path)
        if not self.topk:
            q = probabilities(process_rows(logits_processor, scores, context_of))  # (O, V)
            return q, None, q
        ids, q_top = top_probabilities(logits_processor, scores, context_of, self.topk)  # (O, K), (O, K)
        return torch.zeros_like(scores).scatter_(1, ids, q_top), ids, q_top

    def _next_pass(self, tree: DraftTree, opened: list, slot: dict[int, int], T: int, d: int, device):
        """(1, O) the open nodes' tokens (drafts d + 1 after T committed tokens), (1, O) positions and the mask
        (None while the drafts fed are one chain: the cache's own causal order). Each open node sees the committed
        tokens, its fed ancestors and itself."""
        start = self.cache.get_seq_length()
        nodes = [o[0] for o in opened]
        for i, node in enumerate(nodes):
            slot[node] = start + i
        feed = torch.tensor([[tree.tokens[node] for node in nodes]], device=device)  # (1, O)
        positions = torch.full((1, len(nodes)), T + d, device=device)  # (1, O)
        if len(slot) - 1 == len(tree.path_to(nodes[0])) and len(nodes) == 1:
            return feed, positions, None  # every node fed so far lies on this node's path
        allowed = torch.zeros(len(nodes), start + len(nodes), dtype=torch.bool)  # (O, C + O) True = attend
        allowed[:, :T] = True
        for i, node in enumerate(nodes):
            allowed[i, [slot[a] for a in tree.path_to(node)]] = True
        mask = mask_for_attention(allowed.to(device), self.lm.config._attn_implementation, self.lm.dtype)
        return feed, positions, mask


__all__ = ["BaseChain", "without_earlier"]
