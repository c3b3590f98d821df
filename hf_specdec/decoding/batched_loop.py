"""Speculative decoding of several sequences at once: one target forward verifies every row's draft tree.

Rows accept different numbers of drafts, so the KV cache is kept *left-padded and compact*: after each step every
row keeps only its committed rows (prefix + accepted path) and the batch is re-aligned to the right, the empty
slots on the left masked out (`valid`). Positions are per row (the row's own token count), exactly what plain
batched `generate()` gives left-padded prompts, so greedy output matches it row for row.

Each row has its own candidate generator (the drafter kind's, with its own context cache); the drafter runs once
per row and step (it is small), the target once per step for the whole batch. Rows may join (`add`, prefilled
as a sub-batch and merged into the cache) and leave (`drop`) between steps: continuous batching.

One step, B rows (N_b draft nodes in row b, N = max N_b, S cached slots):
  1) every row drafts a tree (a chain, a best-first tree, or an exactly-sampled chain) under its last token;
  2) one target forward over (B, 1 + N) with a (B, 1 + N, S + 1 + N) mask: a node sees its row's valid slots,
     its ancestors and itself;
  3) per row: greedy walk or speculative sampling on its processed rows; features of the kept rows to its drafter;
  4) per row: commit (cut at max_length / EOS / other criteria); the cache keeps the committed rows, re-aligned.
Host syncs: per row and step (tree building, acceptance), not per vocabulary entry.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field

import torch
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedModel, StoppingCriteriaList
from transformers.cache_utils import DynamicCache

from ..models.registry import generator_class_for
from ..models.settings import DecodingSettings
from ..models.target_features import tapped_features
from ..verification.acceptance import greedy_walk, speculative_walk
from ..verification.processed import probabilities, process_rows, row_processors
from ..verification.prompt_lookup import prompt_lookup_candidates
from ..verification.tree import DraftTree, mask_for_attention, tree_attention_mask
from .speculative_loop import path_context, truncate_new


@dataclass
class Row:
    """One sequence of the batch."""

    ids: torch.LongTensor  # (1, T) its tokens, unpadded: prompt + generated
    prompt_len: int
    generator: object  # the drafter kind's candidate generator (own context cache)
    max_length: int  # like generation_config.max_length, for this row's unpadded tokens
    padding: torch.LongTensor | None = None  # (1, P) left padding plain batched generate shows its processors
    processors: LogitsProcessorList | None = None  # the call's processors as they apply to this row
    done: bool = False
    new_tokens: list[int] = field(default_factory=list)


class SpeculativeBatch:
    """Rows decoding together with one drafter and one target (see the module docstring)."""

    def __init__(
        self,
        target: PreTrainedModel,
        drafter: PreTrainedModel,
        generation_config: GenerationConfig,
        logits_processor: LogitsProcessorList | None = None,
        stopping_criteria: StoppingCriteriaList | None = None,
    ) -> None:
        self.target, self.drafter, self.config = target, drafter, generation_config
        self.logits_processor = logits_processor or LogitsProcessorList()
        self.stopping_criteria = stopping_criteria
        self.settings: DecodingSettings = drafter.decoding
        self.do_sample = bool(generation_config.do_sample)
        self.exact_q = self.do_sample and self.settings.sampled_drafts == "exact"
        self.generator_class = generator_class_for(drafter)
        self.rows: list[Row] = []
        self.cache = DynamicCache()
        self.valid = torch.zeros(0, 0, dtype=torch.bool, device=target.device)  # (B, S)
        params = inspect.signature(target.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"  # transformers renamed it
        self.eos = getattr(generation_config, "_eos_token_tensor", None)
        if self.eos is None and generation_config.eos_token_id is not None:
            eos = generation_config.eos_token_id
            self.eos = torch.tensor(eos if isinstance(eos, list) else [eos], device=target.device)

    # -- joining and leaving -------------------------------------------------------------------------------------
    @torch.no_grad()
    def add(
        self, prompts: list[torch.LongTensor], max_lengths: list[int], padding: list[int] | None = None
    ) -> list[Row]:
        """Prefill `prompts` ((T_i,) each) as a left-padded sub-batch, merge them in; returns their rows (each
        already holds its first generated token, like plain generate's first step). A row ends at
        `max_lengths[i]` tokens (prompt included), at EOS, or at a stopping criterion. `padding[i]` pad tokens are
        put before the row's tokens where logits processors look (length- and history-dependent processors then
        see what they see in a left-padded plain batch)."""
        dev = self.target.device
        width = max(len(p) for p in prompts)
        pad = self.config.pad_token_id if self.config.pad_token_id is not None else 0
        ids = torch.full((len(prompts), width), pad, dtype=torch.long, device=dev)
        valid = torch.zeros(len(prompts), width, dtype=torch.bool, device=dev)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = p.to(dev)
            valid[i, width - len(p) :] = True
        positions = (valid.long().cumsum(-1) - 1).clamp_min(0)
        cache = DynamicCache()
        gen0 = self._generator()
        out = self.target(
            ids,
            attention_mask=valid.long(),
            position_ids=positions,
            **{self.cache_arg: cache},
            use_cache=True,
            output_hidden_states=gen0.model_kwargs_overrides["output_hidden_states"],
            logits_to_keep=1,
        )
        feats = tapped_features(out.hidden_states, gen0.layer_ids, width)  # (b, width, L*H)
        raw = out.logits[:, -1].float()  # (b, V)
        added = []
        for i, p in enumerate(prompts):
            row_ids = p.to(dev)[None]
            pads = torch.full((1, padding[i] if padding else 0), pad, dtype=torch.long, device=dev)
            gen = gen0 if i == 0 else self._generator()
            gen.queue_features(feats[i : i + 1, width - len(p) :])
            gen.stats.prefill_forwards += 1
            seen = torch.cat([pads, row_ids], dim=-1)
            processors = row_processors(self.logits_processor, i, len(prompts))
            processed = process_rows(processors, raw[i : i + 1], lambda r, x=seen: x)
            first = torch.multinomial(probabilities(processed), 1) if self.do_sample else processed.argmax(-1, True)
            row = Row(row_ids, len(p), gen, max_lengths[i], pads, processors)
            self._commit(row, first)
            added.append(row)
        self._merge(cache, valid)
        self.rows.extend(added)
        return added

    def drop(self, keep: list[int]) -> None:
        """Keep only rows `keep` (indices into `self.rows`), in that order."""
        index = torch.tensor(keep, dtype=torch.long, device=self.valid.device)
        for layer in self.cache.layers:
            layer.keys, layer.values = layer.keys.index_select(0, index), layer.values.index_select(0, index)
        self.valid = self.valid.index_select(0, index)
        self.rows = [self.rows[i] for i in keep]
        self._realign()

    def drop_finished(self) -> list[Row]:
        finished = [r for r in self.rows if r.done]
        if finished:
            self.drop([i for i, r in enumerate(self.rows) if not r.done])
        return finished

    # -- one speculative step --------------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self) -> None:
        """One drafted target forward for every unfinished row (finished rows ride along with no drafts)."""
        if not self.rows:
            return
        dev = self.target.device
        trees = [self._draft(row) for row in self.rows]  # 1)
        n = max(len(t) for t in trees) + 1
        B, S = self.valid.shape
        pad = self.config.pad_token_id if self.config.pad_token_id is not None else 0
        feed = torch.full((B, n), pad, dtype=torch.long, device=dev)
        positions = torch.zeros(B, n, dtype=torch.long, device=dev)
        allowed = torch.zeros(B, n, S + n, dtype=torch.bool, device=dev)
        allowed[:, :, :S] = self.valid[:, None, :]
        for b, (row, tree) in enumerate(zip(self.rows, trees, strict=True)):
            T = row.ids.shape[1]
            feed[b, 0] = row.ids[0, -1]
            feed[b, 1 : len(tree) + 1] = torch.tensor(tree.tokens, dtype=torch.long)
            positions[b, 0], depth = T - 1, tree.depths()
            positions[b, 1 : len(tree) + 1] = T - 1 + torch.tensor(depth, dtype=torch.long)
            allowed[b, :, S:] = _tree_visibility(tree, n).to(dev)
        out = self.target(  # 2)
            feed,
            attention_mask=mask_for_attention(allowed, self.target.config._attn_implementation, self.target.dtype),
            position_ids=positions,
            **{self.cache_arg: self.cache},
            use_cache=True,
            output_hidden_states=self.rows[0].generator.model_kwargs_overrides["output_hidden_states"],
        )
        raw = out.logits.float()  # (B, n, V)
        feats = tapped_features(out.hidden_states, self.rows[0].generator.layer_ids, n)  # (B, n, L*H)
        keep = torch.zeros(B, S + n, dtype=torch.bool, device=dev)
        keep[:, :S] = self.valid
        for b, (row, tree) in enumerate(zip(self.rows, trees, strict=True)):  # 3) and 4)
            if row.done:
                continue
            rows = self._accept(row, tree, raw[b, : len(tree) + 1], feats[b : b + 1])
            keep[b, S + torch.tensor(rows, device=dev)] = True
        self._compact(keep)

    @property
    def finished(self) -> bool:
        return all(r.done for r in self.rows)

    # -- internals -------------------------------------------------------------------------------------------------
    def _generator(self):
        return self.generator_class(self.drafter, self.target, self.config, self.logits_processor or None, None)

    def _draft(self, row: Row) -> DraftTree:
        room = row.max_length - row.ids.shape[1] - 1
        k = min(row.generator.block_size - 1, room)
        if row.done or k <= 0:
            return DraftTree()
        if self.exact_q:
            tree = row.generator.sampled_tree(row.ids, k, self.settings.sample_branches, row.processors)
        else:
            tree = row.generator.greedy_tree(row.ids, k, self.settings.tree_budget, self.settings.tree_topk)
        if self.settings.prompt_lookup_tokens:
            width = min(self.settings.prompt_lookup_tokens, room)
            tree.add_chain(
                prompt_lookup_candidates(row.ids, self.settings.prompt_lookup_ngram, width), not self.exact_q
            )
        return tree

    def _accept(self, row: Row, tree: DraftTree, raw: torch.Tensor, feats: torch.Tensor) -> list[int]:
        """Acceptance for one row; returns the fed slots (0 = its last token) whose KV rows stay."""
        seen = row.ids if row.padding is None else torch.cat([row.padding, row.ids], dim=-1)
        context = functools.partial(path_context, seen, tree)
        processed = process_rows(row.processors, raw, context)  # (N_b + 1, V)
        if self.do_sample:
            path, bonus = speculative_walk(tree, probabilities(processed))
        else:
            path, bonus = greedy_walk(tree, processed.argmax(dim=-1).tolist())
        rows = [0] + [c + 1 for c in path]
        row.generator.queue_features(feats[:, rows])
        row.generator.stats.record(len(tree), len(path))
        new = torch.tensor([[tree.tokens[c] for c in path] + [bonus]], device=row.ids.device)
        self._commit(row, new)
        return rows

    def _commit(self, row: Row, new: torch.LongTensor) -> None:
        """Append `new` (1, n) to the row, cut where plain generate would stop (max_length, EOS, criteria)."""
        new, stopped = truncate_new(new, row.ids, row.max_length, self.eos, self.stopping_criteria)
        row.ids = torch.cat([row.ids, new], dim=-1)
        row.new_tokens.extend(new[0].tolist())
        row.done = row.done or stopped or row.ids.shape[1] >= row.max_length

    def _merge(self, cache: DynamicCache, valid: torch.Tensor) -> None:
        """Append a prefilled sub-batch's cache and slot mask, left-padding the shorter side."""
        if not self.rows:
            self.cache, self.valid = cache, valid
            return
        S = max(self.valid.shape[1], valid.shape[1])
        for mine, theirs in zip(self.cache.layers, cache.layers, strict=True):
            mine.keys = torch.cat([_left_pad(mine.keys, S), _left_pad(theirs.keys, S)], dim=0)
            mine.values = torch.cat([_left_pad(mine.values, S), _left_pad(theirs.values, S)], dim=0)
        self.valid = torch.cat([_left_pad_mask(self.valid, S), _left_pad_mask(valid, S)], dim=0)

    def _compact(self, keep: torch.Tensor) -> None:
        """Keep slots `keep` (B, S') of every row, right-aligned, the rest masked out on the left."""
        count = keep.sum(dim=1)  # (B,)
        width = int(count.max())
        order = torch.sort((~keep).long(), dim=1, stable=True).indices[:, :width]  # kept slot indices first
        shift = width - count  # (B,) empty slots on the left
        col = torch.arange(width, device=keep.device)[None]
        src = order.gather(1, (col - shift[:, None]).clamp_min(0))  # (B, width)
        self.valid = col >= shift[:, None]
        for layer in self.cache.layers:
            index = src[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3])
            layer.keys, layer.values = layer.keys.gather(2, index), layer.values.gather(2, index)

    def _realign(self) -> None:
        if self.rows:
            self._compact(self.valid)


def _tree_visibility(tree: DraftTree, n: int) -> torch.Tensor:
    """(n, n) fed slot i sees fed slot j: the root, its ancestors and itself; padding slots see themselves."""
    allowed = torch.eye(n, dtype=torch.bool)
    size = len(tree) + 1
    allowed[:size, :size] = tree_attention_mask(tree, 0, torch.float32, torch.device("cpu"), boolean=True)[0, 0]
    return allowed


def _left_pad(x: torch.Tensor, width: int) -> torch.Tensor:
    missing = width - x.shape[2]
    return x if missing == 0 else torch.cat([x.new_zeros(*x.shape[:2], missing, x.shape[3]), x], dim=2)


def _left_pad_mask(valid: torch.Tensor, width: int) -> torch.Tensor:
    missing = width - valid.shape[1]
    return valid if missing == 0 else torch.cat([valid.new_zeros(valid.shape[0], missing), valid], dim=1)


@torch.no_grad()
def batched_generate(
    target: PreTrainedModel,
    drafter: PreTrainedModel,
    input_ids: torch.LongTensor,
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    attention_mask: torch.Tensor | None = None,
    streamer=None,
    **unused,
) -> torch.LongTensor:
    """`generate()` for a batch of (left-padded) prompts: same output as plain batched greedy / sampled decoding."""
    if streamer is not None:
        raise ValueError("streamers take one sequence; with a batch, stream per request (hf_specdec.SpeculativeServer)")
    if generation_config.return_dict_in_generate:
        raise ValueError("return_dict_in_generate is not supported with batch size > 1 yet; it returns the sequences")
    if target.config._attn_implementation not in ("sdpa", "eager"):  # refused before any forward
        raise ValueError(
            "batched speculative decoding needs an attention implementation that takes a per-row mask (sdpa or "
            f"eager); the target uses {target.config._attn_implementation!r}. Load it with attn_implementation='sdpa'."
        )
    mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    if bool((mask[:, :-1] & ~mask[:, 1:]).any()):
        raise ValueError("padding must be on the left for batched drafting (tokenizer.padding_side = 'left')")
    extra = [c for c in stopping_criteria if type(c).__name__ not in ("MaxLengthCriteria", "EosTokenCriteria")]
    batch = SpeculativeBatch(
        target, drafter, generation_config, logits_processor, StoppingCriteriaList(extra) if extra else None
    )
    width = input_ids.shape[1]
    prompts = [ids[m] for ids, m in zip(input_ids, mask, strict=True)]
    # max_length counts the padded prompt, as in plain generate
    pads = [width - len(p) for p in prompts]
    rows = batch.add(prompts, [generation_config.max_length - n for n in pads], pads)
    while not batch.finished:
        batch.step()
        batch.drop_finished()
    longest = max(len(r.new_tokens) for r in rows)
    pad = generation_config.pad_token_id if generation_config.pad_token_id is not None else 0
    out = torch.full((len(rows), width + longest), pad, dtype=torch.long, device=input_ids.device)
    out[:, :width] = input_ids
    for i, row in enumerate(rows):
        out[i, width : width + len(row.new_tokens)] = torch.tensor(row.new_tokens, device=input_ids.device)
    drafter.last_acceptance_stats = type(rows[0].generator.stats).combine([r.generator.stats for r in rows])
    return out


__all__ = ["Row", "SpeculativeBatch", "batched_generate"]
