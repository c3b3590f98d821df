"""Settings a drafted `generate()` cannot honour, refused with an error that says what to change.

transformers itself ignores an assistant under beam search (with only a log line), so every refusal here
is a case that would otherwise give silently different behaviour or an obscure failure deeper down.
"""

from __future__ import annotations

import logging

from transformers import GenerationConfig, LogitsProcessorList, PreTrainedModel, StaticCache
from transformers.generation.configuration_utils import GenerationMode, SynthIDTextWatermarkingConfig
from transformers.generation.logits_process import (
    ClassifierFreeGuidanceLogitsProcessor,
    SynthIDTextWatermarkLogitsProcessor,
    UnbatchedClassifierFreeGuidanceLogitsProcessor,
)

from ..models.target_features import check_drafter_matches_target
from .transformers_names import check_transformers_names

logger = logging.getLogger(__name__)
_STATIC_CACHES = ("static", "offloaded_static", "hybrid", "sliding_window", "hybrid_chunked", "offloaded_hybrid")
# Processors that keep per-call state or run a model of their own, assuming one call per generated token: verifying
# several drafted tokens per target forward (and dropping the rejected ones) would give different output.
_STATEFUL_PROCESSORS = {
    UnbatchedClassifierFreeGuidanceLogitsProcessor: "guidance_scale (classifier-free guidance)",
    ClassifierFreeGuidanceLogitsProcessor: "classifier-free guidance",
    SynthIDTextWatermarkLogitsProcessor: "SynthID watermarking",
}


def validate_generation_settings(
    target: PreTrainedModel,
    drafter: PreTrainedModel,
    generation_mode,
    generation_config: GenerationConfig,
    explicit: frozenset[str] | None = None,
) -> None:
    """Raise ValueError for settings a drafter cannot serve; pass silently otherwise. `explicit`: the transformers
    drafting settings a `generate()` call passed, which may map onto the drafter's `DecodingSettings` for the call;
    None where settings are not mapped per call (`transformers_names`)."""
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
    check_transformers_names(drafter, generation_config, explicit)
    _refuse_unhonoured_settings(name, generation_config)
    check_drafter_matches_target(drafter.config, target)
    warn_int8_outliers(target)


def _refuse_unhonoured_settings(name: str, generation_config: GenerationConfig) -> None:
    """Settings whose processing assumes one target forward per token, or that assisted decoding drops."""
    scale = generation_config.guidance_scale
    if scale is not None and scale != 1:
        raise ValueError(
            f"guidance_scale={scale} (classifier-free guidance) is not supported with {name}: its processor runs "
            "the target once per generated token on the unconditional prompt and keeps its own cache, so verifying "
            "several drafted tokens per forward would give different output than plain generate(). Call generate "
            "without assistant_model for guided generation, or leave guidance_scale unset."
        )
    if isinstance(generation_config.watermarking_config, SynthIDTextWatermarkingConfig):
        raise ValueError(
            f"SynthID watermarking is not supported with {name}: its processor keeps state from one call per "
            "generated token, which verifying a block of drafts breaks. Call generate without assistant_model, or "
            "use the green-list WatermarkingConfig (a function of the tokens so far, exact with a drafter)."
        )
    if getattr(generation_config, "dola_layers", None) is not None:
        raise ValueError(
            f"dola_layers (DoLa decoding) is not supported with {name}: transformers drops DoLa under assisted "
            "generation, so the output would be plain greedy, not DoLa's. Unset dola_layers or drop assistant_model."
        )


def validate_processors(drafter: PreTrainedModel, logits_processor: LogitsProcessorList | None) -> None:
    """Refuse logits processors (built from settings or passed in `logits_processor=`) that keep per-token state."""
    for processor in logits_processor or ():
        for cls, what in _STATEFUL_PROCESSORS.items():
            if isinstance(processor, cls):
                raise ValueError(
                    f"{type(processor).__name__} ({what}) is not supported with {type(drafter).__name__}: it keeps "
                    "state from one call per generated token, so output would differ from plain generate(). "
                    "Call generate without assistant_model for it, or remove it from logits_processor."
                )


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


def validate_inputs(drafter: PreTrainedModel, input_ids, model_kwargs: dict, own_loop: bool = False) -> None:
    """Checks that need the call's prepared inputs: the cache it continues from and, for hf_specdec's own loop
    (`own_loop`), how the prompt is given."""
    name = type(drafter).__name__
    cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
    if isinstance(cache, StaticCache):
        raise ValueError(
            f"{type(cache).__name__} is not supported with {name}: speculative decoding rolls the cache back. "
            "Pass no cache (a DynamicCache is made) or a DynamicCache."
        )
    cached = cache.get_seq_length() if hasattr(cache, "get_seq_length") else 0
    if cached:
        raise ValueError(
            f"past_key_values already holds {cached} tokens: {name} drafts from the target's hidden states of "
            "every token, which a KV cache does not keep, so a drafted generate() cannot continue from it. Pass the "
            "whole text as input_ids with no cache (or an empty DynamicCache), or call generate without "
            "assistant_model to continue from this cache."
        )
    if own_loop and model_kwargs.get("inputs_embeds") is not None:
        raise ValueError(
            f"inputs_embeds is not supported with {name} in hf_specdec's own loop (the adaptive budget, trees, "
            "prompt lookup, exact-q sampling, batches): it prefills the target and the drafter from token ids. "
            "Pass input_ids instead."
        )


__all__ = ["validate_generation_settings", "validate_inputs", "validate_processors"]
