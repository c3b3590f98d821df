"""hf_specdec's own decoding loop: token trees verified in one target forward, and exact-q sampling.

transformers' assisted loop verifies one chain and, when sampling, trusts whatever logits the generator returns
(no residual zero-mass guard). This loop serves `target.generate(..., assistant_model=drafter)` whenever the
drafter's `DecodingSettings` ask for a tree, prompt-lookup branches or sampled drafts; argmax chains keep using
transformers' loop. Batch size 1.

Per step (T committed tokens; the last one, the anchor, is not in the target's cache yet):
1) draft a tree under the anchor (argmax chain, best-first tree, or draws from q), plus a prompt-lookup branch;
2) one target forward over `[anchor, nodes]` with a tree mask and depth positions (a chain needs neither);
3) acceptance: greedy walk, or multi-draft speculative sampling with the exact q of every node;
4) keep only the accepted path in the target's KV cache, and queue its hidden states for the drafter;
5) commit accepted tokens + one, truncated at max_length, EOS and any other stopping criterion.

Host syncs per step: the tree's token ids (drafter top-k or draws) and the walk's decisions (greedy: the target's
argmax rows, once; sampling: one per child tried). No loop touches the vocabulary dimension.
"""

from __future__ import annotations

import functools
import inspect

import torch
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedModel, StoppingCriteriaList
from transformers.generation.utils import GenerateDecoderOnlyOutput

from ..models.registry import generator_class_for
from ..models.settings import DecodingSettings
from ..models.target_features import tapped_features
from ..verification.acceptance import greedy_walk, speculative_walk
from ..verification.processed import probabilities, process_rows
from ..verification.prompt_lookup import prompt_lookup_candidates
from ..verification.tree import DraftTree, mask_for_attention, tree_attention_mask, tree_position_ids


@torch.no_grad()
def speculative_generate(
    target: PreTrainedModel,
    drafter: PreTrainedModel,
    input_ids: torch.LongTensor,
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    streamer=None,
    **model_kwargs,
) -> torch.LongTensor | GenerateDecoderOnlyOutput:
    """Decode with `drafter` under its `DecodingSettings`; same output contract as `generate()`."""
    settings: DecodingSettings = drafter.decoding
    do_sample = bool(generation_config.do_sample)
    exact_q = do_sample and settings.sampled_drafts == "exact"
    _refuse_unsupported(target, generation_config, model_kwargs)
    cache_arg = "cache" if "cache" in inspect.signature(target.forward).parameters else "past_key_values"
    cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
    gen = generator_class_for(drafter)(drafter, target, generation_config, logits_processor, stopping_criteria)
    taps = gen.model_kwargs_overrides["output_hidden_states"]
    layer_ids = gen.layer_ids
    want_scores = generation_config.return_dict_in_generate and generation_config.output_scores
    want_logits = generation_config.return_dict_in_generate and generation_config.output_logits
    scores, raw_logits = [], []

    # 1) prefill: the prompt through the target; its features go to the drafter; the first token is a plain step
    out = target(input_ids, **{cache_arg: cache}, use_cache=True, output_hidden_states=taps, logits_to_keep=1)
    gen.queue_features(tapped_features(out.hidden_states, layer_ids, input_ids.shape[1]))
    raw = out.logits[:, -1].float()  # (1, V)
    processed = process_rows(logits_processor, raw, lambda r: input_ids)
    first = torch.multinomial(probabilities(processed), 1) if do_sample else processed.argmax(-1, keepdim=True)
    gen.stats.prefill_forwards += 1
    input_ids = torch.cat([input_ids, first], dim=-1)
    scores.append(processed) if want_scores else None
    raw_logits.append(raw) if want_logits else None
    if streamer is not None:
        streamer.put(first.cpu())

    while not bool(stopping_criteria(input_ids, None).any()):
        T = input_ids.shape[1]
        room = generation_config.max_length - T - 1  # drafts that can still be committed before the bonus
        # 2) the draft tree under the anchor input_ids[:, -1]
        k = min(gen.block_size - 1, room)
        if k <= 0:
            tree = DraftTree()
        elif exact_q:
            tree = gen.sampled_tree(input_ids, k, settings.sample_branches, logits_processor)
        else:
            tree = gen.greedy_tree(input_ids, k, settings.tree_budget, settings.tree_topk)
        if settings.prompt_lookup_tokens and room > 0:
            width = min(settings.prompt_lookup_tokens, room)
            lookup = prompt_lookup_candidates(input_ids, settings.prompt_lookup_ngram, width)
            tree.add_chain(lookup, merge=not exact_q)

        # 3) one target forward over [anchor, nodes]
        feed = torch.tensor([[0] + tree.tokens], device=input_ids.device)  # (1, N + 1)
        feed[0, 0] = input_ids[0, -1]
        mask, positions = _tree_inputs(target, tree, T - 1, input_ids.device)
        out = target(
            feed,
            attention_mask=mask,
            position_ids=positions,
            **{cache_arg: cache},
            use_cache=True,
            output_hidden_states=taps,
        )
        raw = out.logits[0].float()  # (N + 1, V)

        # 4) acceptance
        processed = process_rows(logits_processor, raw, functools.partial(path_context, input_ids, tree))  # (N+1, V)
        if do_sample:
            path, bonus = speculative_walk(tree, probabilities(processed))
        else:
            path, bonus = greedy_walk(tree, processed.argmax(dim=-1).tolist())
        rows = [0] + [c + 1 for c in path]  # verified rows whose tokens are now committed (anchor + path)

        # 5) cache and drafter context keep only the accepted path
        _keep_rows(cache, T - 1, rows, tree.is_chain(), len(tree) + 1)
        gen.queue_features(tapped_features(out.hidden_states, layer_ids, len(tree) + 1)[:, rows])
        gen.stats.record(len(tree), len(path))

        # 6) commit, cut at max_length / EOS / other criteria (the cache is cut to match)
        new = torch.tensor([[tree.tokens[c] for c in path] + [bonus]], device=input_ids.device)
        eos = getattr(generation_config, "_eos_token_tensor", None)
        new, _ = truncate_new(new, input_ids, generation_config.max_length, eos, gen.stopping_criteria)
        if new.shape[1] < len(rows):
            cache.crop(-(len(rows) - new.shape[1]))
        if want_scores:
            scores.extend(processed[r : r + 1] for r in rows[: new.shape[1]])
        if want_logits:
            raw_logits.extend(raw[r : r + 1] for r in rows[: new.shape[1]])
        input_ids = torch.cat([input_ids, new], dim=-1)
        if streamer is not None:
            streamer.put(new.cpu())

    if streamer is not None:
        streamer.end()
    if not generation_config.return_dict_in_generate:
        return input_ids
    cache_field = "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"
    return GenerateDecoderOnlyOutput(
        sequences=input_ids,
        scores=tuple(scores) if want_scores else None,
        logits=tuple(raw_logits) if want_logits else None,
        **{cache_field: cache},
    )


def path_context(input_ids: torch.LongTensor, tree: DraftTree, row: int) -> torch.LongTensor:
    """(1, T + depth) the tokens verified row `row` conditions on: committed tokens and the path to it."""
    if row == 0:
        return input_ids
    path = torch.tensor([tree.tokens[i] for i in tree.path_to(row - 1)], device=input_ids.device)
    return torch.cat([input_ids, path[None]], dim=-1)


def _refuse_unsupported(target: PreTrainedModel, generation_config: GenerationConfig, model_kwargs: dict) -> None:
    if generation_config.output_attentions or generation_config.output_hidden_states:
        raise ValueError(
            "output_attentions / output_hidden_states are not returned by hf_specdec's tree and sampling loop; "
            "unset them, or set drafter.decoding = DecodingSettings(sampled_drafts='argmax') for argmax chains."
        )
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool(mask.all()):
        raise ValueError("hf_specdec's loop serves one unpadded sequence; drop the padding from attention_mask.")
    cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
    layers = getattr(cache, "layers", None)
    if layers is None or any(type(layer).__name__ != "DynamicLayer" for layer in layers):
        raise ValueError(
            "hf_specdec's tree loop needs a plain DynamicCache (full attention layers) to keep the accepted path; "
            f"got {type(cache).__name__}. Use a full-attention target or a chain (DecodingSettings(tree_budget=0))."
        )


def _tree_inputs(target: PreTrainedModel, tree: DraftTree, root_position: int, device: torch.device):
    """(mask, position_ids) for the verification forward; (None, consecutive positions) for a chain."""
    if tree.is_chain():
        return None, torch.arange(root_position, root_position + len(tree) + 1, device=device)[None]
    positions = tree_position_ids(tree, root_position, device)
    allowed = tree_attention_mask(tree, root_position, target.dtype, device, boolean=True)[0, 0]
    return mask_for_attention(allowed, target.config._attn_implementation, target.dtype), positions


def _keep_rows(cache, prefix_len: int, rows: list[int], chain: bool, fed: int) -> None:
    """Drop the KV rows of rejected nodes: keep the prefix and the verified rows `rows` (of the `fed` just added)."""
    if chain:  # rows are 0..a: a crop
        if fed > len(rows):
            cache.crop(-(fed - len(rows)))
        return
    layer0 = cache.layers[0]
    keep = torch.cat([torch.arange(prefix_len), prefix_len + torch.tensor(rows)]).to(layer0.keys.device)  # (T + a,)
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(-2, keep)
        layer.values = layer.values.index_select(-2, keep)


def truncate_new(new, input_ids, max_length: int, eos, extra_criteria) -> tuple[torch.LongTensor, bool]:
    """Cut new tokens (1, n) where plain generate would have stopped: `max_length`, the first EOS (`eos` ids or
    None), any other criterion. Returns the kept tokens and whether EOS or a criterion ended generation."""
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


__all__ = ["speculative_generate"]
