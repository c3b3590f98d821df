"""The rows that decode together: their tokens, drafters and the target's shared KV cache.

Rows accept different numbers of drafts, so the cache is kept *left-padded and compact*: after each step every row
keeps only its committed rows (prefix + accepted path) and the batch is re-aligned to the right, the empty slots on
the left masked out (`valid`). Positions are per row (the row's own token count), exactly what plain batched
`generate()` gives left-padded prompts (a row that is all padding: its masked ids prefilled, its new tokens
numbered from 1, as plain generate does), so greedy output matches it row for row. A batch of one row is a single
sequence: its cache stays unpadded and is cut with a crop where it can be.

Each row has its own candidate generator (its drafter kind's, with its own context cache); the drafter runs once
per row and step (it is small), the target once per step for the whole batch (`step.py`). Rows may join (`add`,
prefilled as a sub-batch and merged into the cache) and leave (`drop`) between steps: continuous batching.
`checkpoint()` returns a function that puts the batch back as it was, so a step or a join that raises half-way
(out of memory in one layer, say) can be undone and retried.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers import GenerationConfig, LogitsProcessorList, PretrainedConfig, PreTrainedModel, StoppingCriteriaList
from transformers.cache_utils import DynamicCache

from ..models.padding import left_pad
from ..models.registry import capabilities_of, generator_class_for
from ..models.settings import DecodingSettings
from ..models.target_features import tapped_features
from ..verification.processed import probabilities, process_rows, row_processors, sample
from ..verification.stats import BatchForwards
from ..verification.stopping import extra_stopping_criteria
from .budget import Budget, FixedBudget
from .budget_memory import memory_of


@dataclass
class Row:
    """One sequence of the batch."""

    ids: torch.LongTensor  # (1, T) its tokens, unpadded: prompt + generated
    prompt_len: int
    generator: object  # the drafter kind's candidate generator (own context cache)
    max_length: int  # like generation_config.max_length, for this row's unpadded tokens
    padding: torch.LongTensor | None = None  # (1, P) the masked ids before it in plain batched generate's input
    processors: LogitsProcessorList | None = None  # the call's processors as they apply to this row
    position_shift: int = 0  # 1 for a row that is all padding: plain generate numbers its new tokens from 1
    done: bool = False
    copying: bool = False  # its last step accepted a node the prompt-lookup branch proposed (the budget reads it)
    drafter_behind: bool = True  # its drafter has not read all its tokens (the prompt, plain steps'): it catches up
    new_tokens: list[int] = field(default_factory=list)
    scores: list[torch.Tensor] | None = None  # (1, V) processed rows of committed tokens, when asked for
    logits: list[torch.Tensor] | None = None  # (1, V) raw rows of committed tokens, when asked for


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
        # max_length and EOS are applied per row by `commit`; other criteria are checked token by token there
        self.stopping_criteria = extra_stopping_criteria(stopping_criteria)
        self.settings: DecodingSettings = drafter.decoding
        self.do_sample = bool(generation_config.do_sample)
        self.exact_q = self.do_sample and self.settings.sampled_drafts == "exact"
        self.generator_class = generator_class_for(drafter)
        self.draft_rows = capabilities_of(drafter).draft_rows  # the generator class drafts rows in one pass
        adaptive = self.settings.budget == "auto"
        # a kind that chooses each sampled block's way from realized rates, plain steps included (the budget only
        # cuts), and maybe its length too (the budget verifies each block whole); a registered kind may say neither
        kind = self.generator_class
        chooses = self.exact_q and getattr(kind, "chooses_sampled_blocks", lambda *_: False)(drafter, self.settings)
        whole = chooses and getattr(kind, "sampled_blocks_whole", lambda *_: False)(drafter, self.settings)
        if adaptive:
            self.budget = Budget(memory_of(drafter, target), plain_steps=not chooses, cuts=not whole)
        else:
            self.budget = FixedBudget()
        self.rows: list[Row] = []
        self.forwards = BatchForwards()  # target forwards of the whole batch, shared by its rows' statistics
        self.cache = DynamicCache()
        self.valid = torch.zeros(0, 0, dtype=torch.bool, device=target.device)  # (B, S)
        self.taps: list[int] | None = None  # output_hidden_states indices the drafter reads
        self.layer_ids: list[int] | None = None
        params = inspect.signature(target.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"  # transformers renamed it
        pad = generation_config.pad_token_id
        self.pad_token_id = pad if pad is not None else 0
        self.eos = getattr(generation_config, "_eos_token_tensor", None)
        if self.eos is None and generation_config.eos_token_id is not None:
            eos = generation_config.eos_token_id
            self.eos = torch.tensor(eos if isinstance(eos, list) else [eos], device=target.device)

    # -- joining and leaving -------------------------------------------------------------------------------------
    @torch.no_grad()
    def add(
        self,
        prompts: list[torch.LongTensor],
        max_lengths: list[int],
        padding: list[torch.LongTensor] | None = None,
        cache: DynamicCache | None = None,
        processors: list[LogitsProcessorList] | None = None,
    ) -> list[Row]:
        """Prefill `prompts` ((T_i,) each) as a left-padded sub-batch, merge them in; returns their rows (each
        already holds its first generated token, like plain generate's first step). A row ends at
        `max_lengths[i]` tokens (prompt included), at EOS, or at a stopping criterion. `padding[i]`: the (P_i,)
        masked ids plain batched generate holds before row i's tokens; the prefill feeds them (a row that is all
        padding takes its first token from them, as in plain generate) and logits processors see them (length- and
        history-dependent processors then see what they see in a left-padded plain batch). `cache`: the (empty)
        cache to prefill into, for a first sub-batch (generate() hands its own). `processors[i]`: row i's own
        logits processors, as they apply to it alone (the server builds them per request); default: the batch's,
        as plain batched generate applies them."""
        dev = self.target.device
        no_padding = torch.zeros(0, dtype=torch.long, device=dev)
        pads = [p.to(dev) for p in padding] if padding else [no_padding] * len(prompts)
        width = max(len(p) + len(pad) for p, pad in zip(prompts, pads, strict=True))
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long, device=dev)  # (b, width)
        valid = torch.zeros(len(prompts), width, dtype=torch.bool, device=dev)  # (b, width)
        for i, (p, pad) in enumerate(zip(prompts, pads, strict=True)):
            ids[i, width - len(p) - len(pad) : width - len(p)] = pad
            ids[i, width - len(p) :] = p.to(dev)
            valid[i, width - len(p) :] = True
        positions = (valid.long().cumsum(-1) - 1).clamp_min(0)  # (b, width)
        cache = cache if cache is not None and not self.rows else DynamicCache()
        generators = [self._generator() for _ in prompts]
        self.taps = generators[0].model_kwargs_overrides["output_hidden_states"]
        self.layer_ids = generators[0].layer_ids
        out = self.target(
            ids,
            attention_mask=valid.long(),
            position_ids=positions,
            **{self.cache_arg: cache},
            use_cache=True,
            output_hidden_states=self.taps,
            logits_to_keep=1,
        )
        feats = tapped_features(out.hidden_states, self.layer_ids, width)  # (b, width, L*H) or None
        raw = out.logits[:, -1].float()  # (b, V)
        self.forwards.prefill += 1
        added = []
        for i, (p, gen) in enumerate(zip(prompts, generators, strict=True)):
            row_ids = p.to(dev)[None]
            pad_ids = pads[i][None] if len(pads[i]) else None
            if feats is not None:
                gen.queue_features(feats[i : i + 1, width - len(p) :])
            gen.stats.prefill_forwards += 1
            gen.stats.batch = self.forwards
            if processors is None:
                own = row_processors(self.logits_processor, i, len(prompts))
            else:
                own = processors[i]
            seen = row_ids if pad_ids is None else torch.cat([pad_ids, row_ids], dim=-1)
            processed = process_rows(own, raw[i : i + 1], lambda r, x=seen: x)  # (1, V)
            first = sample(probabilities(processed)) if self.do_sample else processed.argmax(-1, True)
            row = Row(row_ids, len(p), gen, max_lengths[i], pad_ids, own, position_shift=int(len(p) == 0))
            if self.config.return_dict_in_generate:
                row.scores = [processed] if self.config.output_scores else None
                row.logits = [raw[i : i + 1]] if self.config.output_logits else None
            self.commit(row, first)
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
        if self.rows:
            self._compact(self.valid)

    def drop_finished(self) -> list[Row]:
        finished = [r for r in self.rows if r.done]
        if finished:
            self.drop([i for i, r in enumerate(self.rows) if not r.done])
        return finished

    @property
    def finished(self) -> bool:
        return all(r.done for r in self.rows)

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the batch back as it is now: the target's cache and slot mask, the rows (tokens,
        done flags, each row's drafter state: context cache, queued features, statistics) and the budget's memory.
        A step or `add` that raises half-way (an out-of-memory error in one layer leaves some cache layers grown
        and the drafters' queued features consumed) is undone with it and can be run again.

        Cheap enough for every step: tensors are kept by reference (caches and drafters replace their tensors,
        they never write into them), attribute dicts and containers are copied; models and configs are skipped."""
        return _restorer(self, set()) or (lambda: None)

    # -- what the step calls ---------------------------------------------------------------------------------------
    def commit(self, row: Row, new: torch.LongTensor) -> int:
        """Append `new` (1, n) to the row, cut where plain generate would stop (max_length, EOS, criteria); returns
        how many tokens were kept."""
        new, stopped = truncate_new(new, row.ids, row.max_length, self.eos, self.stopping_criteria)
        row.ids = torch.cat([row.ids, new], dim=-1)
        row.new_tokens.extend(new[0].tolist())
        row.done = row.done or stopped or row.ids.shape[1] >= row.max_length
        return new.shape[1]

    def keep_fed(self, kept: list[list[int]], fed: int) -> None:
        """After a step that fed `fed` slots per row: keep the cached prefix and, per row, the fed slots `kept[b]`."""
        self.forwards.verify += 1  # called once per verification forward
        B, S = self.valid.shape
        if B == 1:  # one unpadded row: a crop when the kept slots are a prefix (a chain), else one gather
            rows = kept[0]
            if rows == list(range(len(rows))):
                if fed > len(rows):
                    self.cache.crop(-(fed - len(rows)))
            else:
                index = torch.cat([torch.arange(S), S + torch.tensor(rows, dtype=torch.long)])  # (S + a,)
                for layer in self.cache.layers:
                    index = index.to(layer.keys.device)
                    layer.keys = layer.keys.index_select(-2, index)
                    layer.values = layer.values.index_select(-2, index)
            self.valid = torch.ones(1, S + len(rows), dtype=torch.bool, device=self.valid.device)
            return
        widths = {len(rows) for rows in kept if rows}
        if len(widths) <= 1 and all(rows == list(range(len(rows))) for rows in kept):
            # every row keeps the same prefix of its fed slots (a plain step keeps 1): a crop, no copy of the cache;
            # a finished row (nothing kept) has those slots masked out
            a = widths.pop() if widths else 0
            if fed > a:
                self.cache.crop(-(fed - a))
            new = torch.tensor([bool(rows) for rows in kept], device=self.valid.device)[:, None].expand(B, a)
            self.valid = torch.cat([self.valid, new], dim=1)  # (B, S + a)
            return
        keep = torch.zeros(B, S + fed, dtype=torch.bool)  # (B, S + fed), built on the host: rows are host lists
        for b, rows in enumerate(kept):
            keep[b, [S + r for r in rows]] = True
        keep = keep.to(self.valid.device)
        keep[:, :S] = self.valid
        self._compact(keep)

    # -- internals -------------------------------------------------------------------------------------------------
    def _generator(self):
        return self.generator_class(self.drafter, self.target, self.config, self.logits_processor or None, None)

    def _merge(self, cache: DynamicCache, valid: torch.Tensor) -> None:
        """Append a prefilled sub-batch's cache and slot mask, left-padding the shorter side."""
        if not self.rows:
            self.cache, self.valid = cache, valid
            return
        S = max(self.valid.shape[1], valid.shape[1])
        for mine, theirs in zip(self.cache.layers, cache.layers, strict=True):
            mine.keys = torch.cat([left_pad(mine.keys, S), left_pad(theirs.keys, S)], dim=0)
            mine.values = torch.cat([left_pad(mine.values, S), left_pad(theirs.values, S)], dim=0)
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


# kept by reference by `checkpoint`: tensors (replaced, never written into), models, configs, and immutable values
_BY_REFERENCE = (torch.Tensor, torch.nn.Module, GenerationConfig, PretrainedConfig, str, bytes, int, float, complex)


def _restorer(obj, seen: set[int]) -> Callable[[], None] | None:
    """A function that restores `obj`'s attributes (or items) and, recursively, those of what it holds; None when
    there is nothing to restore (immutable values, models, tensors, classes and functions)."""
    if obj is None or id(obj) in seen or isinstance(obj, (*_BY_REFERENCE, type)) or inspect.isroutine(obj):
        return None
    seen.add(id(obj))
    if isinstance(obj, tuple):
        children = [_restorer(x, seen) for x in obj]
        saved = None
    elif isinstance(obj, list):
        saved = list(obj)
        children = [_restorer(x, seen) for x in saved]
    elif isinstance(obj, dict):
        saved = dict(obj)
        children = [_restorer(x, seen) for x in saved.values()]
    elif type(getattr(obj, "__dict__", None)) is dict:
        saved = dict(vars(obj))
        children = [_restorer(x, seen) for x in saved.values()]
    else:
        return None
    children = [c for c in children if c is not None]

    def restore() -> None:
        if isinstance(obj, list):
            obj[:] = saved
        elif isinstance(obj, dict):
            obj.clear()
            obj.update(saved)
        elif saved is not None:
            vars(obj).clear()
            vars(obj).update(saved)
        for child in children:
            child()

    return restore


def _left_pad_mask(valid: torch.Tensor, width: int) -> torch.Tensor:
    missing = width - valid.shape[1]
    return valid if missing == 0 else torch.cat([valid.new_zeros(valid.shape[0], missing), valid], dim=1)


def truncate_new(new, input_ids, max_length: int, eos, extra_criteria) -> tuple[torch.LongTensor, bool]:
    """The cut of new tokens (1, n) where plain generate would have stopped: `max_length`, the first EOS (`eos`
    ids or None), any other criterion. Returns the kept tokens and whether EOS or a criterion ended generation."""
    new = new[:, : max_length - input_ids.shape[1]]
    if eos is not None:
        hits = torch.isin(new[0], eos.to(new.device)).nonzero()
        if hits.numel():
            return new[:, : int(hits[0]) + 1], True
    if extra_criteria is not None:
        for j in range(new.shape[1]):
            if bool(extra_criteria(torch.cat([input_ids, new[:, : j + 1]], dim=-1), None).any()):
                return new[:, : j + 1], True
    return new, False


__all__ = ["Row", "SpeculativeBatch", "truncate_new"]
