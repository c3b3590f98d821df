"""Settings a drafted `generate()` cannot honour, refused with an error that says what to change.

transformers itself ignores an assistant under beam search (with only a log line), so every refusal here
is a case that would otherwise give silently different behaviour or an obscure failure deeper down.
"""

from __future__ import annotations

import logging

from transformers import GenerationConfig, PreTrainedModel, StaticCache
from transformers.generation.configuration_utils import GenerationMode

from ..models.target_features import check_drafter_matches_target

logger = logging.getLogger(__name__)
_STATIC_CACHES = ("static", "offloaded_static", "hybrid", "sliding_window", "hybrid_chunked", "offloaded_hybrid")


def validate_generation_settings(
    target: PreTrainedModel, drafter: PreTrainedModel, generation_mode, generation_config: GenerationConfig
) -> None:
    """Raise ValueError for settings a drafter cannot serve; pass silently otherwise."""
    name = type(drafter).__name__
    if generation_config.num_beams is not None and generation_config.num_beams > 1:
        raise ValueError(
            f"{name} cannot be used with beam search (num_beams={generation_config.num_beams}): transformers would "
            "silently ignore the drafter. Use num_beams=1 (greedy or sampling) or drop assistant_model."
        )
    if generation_mode != GenerationMode.ASSISTED_GENERATION:
        raise ValueError(f"{name} needs greedy or sampling decoding, but these settings select {generation_mode}.")
    if (generation_config.num_return_sequences or 1) > 1:
        raise ValueError(
            f"num_return_sequences={generation_config.num_return_sequences} is not supported with {name}; "
            "call generate once per sequence."
        )
    if generation_config.cache_implementation in _STATIC_CACHES:
        raise ValueError(
            f"cache_implementation={generation_config.cache_implementation!r} is not supported with {name}: "
            "speculative decoding rolls the cache back. Leave cache_implementation unset (dynamic cache)."
        )
    if generation_config.use_cache is False:
        raise ValueError(f"{name} needs use_cache=True: verification reuses the target's KV cache.")
    for knob in ("prompt_lookup_num_tokens", "assistant_early_exit"):
        if getattr(generation_config, knob, None) is not None:
            raise ValueError(f"{knob} selects another drafting method; unset it when passing {name}.")
    if getattr(generation_config, "use_mtp", False):
        raise ValueError(f"use_mtp selects another drafting method; unset it when passing {name}.")
    check_drafter_matches_target(drafter.config, target)
    warn_int8_outliers(target)


def warn_int8_outliers(target: PreTrainedModel) -> None:
    """bitsandbytes LLM.int8 with an outlier threshold picks fp16 columns over *all* tokens of a forward, so a
    token's logits depend on which other tokens share it: verifying a block (or a batch) cannot reproduce one-token
    decoding bit for bit. Said once per target; `llm_int8_threshold=0.0` makes int8 per-token exact."""
    if getattr(target, "_hf_specdec_int8_warned", False):
        return
    for module in target.modules():
        threshold = getattr(getattr(module, "state", None), "threshold", 0.0)
        if type(module).__name__ == "Linear8bitLt" and threshold and threshold > 0:
            logger.warning(
                "the target is 8-bit (bitsandbytes LLM.int8) with llm_int8_threshold=%s: its outlier columns are "
                "chosen over all tokens of a forward, so drafted (and batched) greedy output can differ from "
                "one-token decoding of the same quantized model. Load it with BitsAndBytesConfig(load_in_8bit=True, "
                "llm_int8_threshold=0.0) for exact output, or use 4-bit.",
                threshold,
            )
            target._hf_specdec_int8_warned = True
            return


def validate_inputs(drafter: PreTrainedModel, input_ids, cache) -> None:
    """Checks that need the prepared inputs (a user-supplied static cache)."""
    name = type(drafter).__name__
    if isinstance(cache, StaticCache):
        raise ValueError(
            f"{type(cache).__name__} is not supported with {name}: speculative decoding rolls the cache back. "
            "Pass no cache (a DynamicCache is made) or a DynamicCache."
        )


__all__ = ["validate_generation_settings", "validate_inputs"]
