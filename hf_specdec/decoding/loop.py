"""hf_specdec's own decoding loop behind `generate()`: one sequence (a batch of one) or a batch of prompts.

transformers' assisted loop verifies one chain and, when sampling, trusts whatever logits the generator returns
(no residual zero-mass guard). This loop serves `target.generate(..., assistant_model=drafter)` whenever the
drafter's `DecodingSettings` ask for a tree, prompt-lookup branches or sampled drafts, and for every batch of more
than one prompt; argmax chains of one sequence keep using transformers' loop. Both entry points prefill a
`SpeculativeBatch` and repeat the one speculative step (`step.py`) until every row has stopped.
"""

from __future__ import annotations

import torch
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedModel, StoppingCriteriaList
from transformers.generation.utils import GenerateDecoderOnlyOutput

from .batch import SpeculativeBatch
from .step import speculative_step


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
    """Decode one sequence with `drafter` under its `DecodingSettings`; same output contract as `generate()`."""
    _refuse_unsupported(generation_config, model_kwargs)
    cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
    batch = SpeculativeBatch(target, drafter, generation_config, logits_processor, stopping_criteria)
    (row,) = batch.add([input_ids[0]], [generation_config.max_length], cache=cache)
    streamed = 0
    while True:
        if streamer is not None and len(row.new_tokens) > streamed:
            streamer.put(torch.tensor([row.new_tokens[streamed:]]))
            streamed = len(row.new_tokens)
        if row.done:
            break
        speculative_step(batch)
    if streamer is not None:
        streamer.end()
    batch.budget.save()  # the cost curve to the cache file (never raises for it)
    sequences = row.ids
    if not generation_config.return_dict_in_generate:
        return sequences
    cache_field = "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"
    return GenerateDecoderOnlyOutput(
        sequences=sequences,
        scores=tuple(row.scores) if row.scores is not None else None,
        logits=tuple(row.logits) if row.logits is not None else None,
        **{cache_field: batch.cache},
    )


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
    batch = SpeculativeBatch(target, drafter, generation_config, logits_processor, stopping_criteria)
    width = input_ids.shape[1]
    prompts = [ids[m] for ids, m in zip(input_ids, mask, strict=True)]
    pads = [ids[~m] for ids, m in zip(input_ids, mask, strict=True)]  # what plain generate holds there
    # max_length counts the padded prompt, as in plain generate
    rows = batch.add(prompts, [generation_config.max_length - len(pad) for pad in pads], pads)
    while not batch.finished:
        speculative_step(batch)
        batch.drop_finished()
    batch.budget.save()  # the cost curve to the cache file (never raises for it)
    longest = max(len(r.new_tokens) for r in rows)
    out = torch.full((len(rows), width + longest), batch.pad_token_id, dtype=torch.long, device=input_ids.device)
    out[:, :width] = input_ids
    for i, row in enumerate(rows):
        out[i, width : width + len(row.new_tokens)] = torch.tensor(row.new_tokens, device=input_ids.device)
    drafter.last_acceptance_stats = type(rows[0].generator.stats).combine([r.generator.stats for r in rows])
    return out


def _refuse_unsupported(generation_config: GenerationConfig, model_kwargs: dict) -> None:
    if generation_config.output_attentions or generation_config.output_hidden_states:
        raise ValueError(
            "output_attentions / output_hidden_states are not returned by hf_specdec's loop (the adaptive budget, "
            "trees, prompt lookup, exact-q sampling); unset them, or pin a plain argmax chain for this call: "
            "drafter.decoding = DecodingSettings(budget='fixed', sampled_drafts='argmax')."
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


__all__ = ["batched_generate", "speculative_generate"]
