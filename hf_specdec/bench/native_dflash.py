"""transformers' own DFlash path as a peer: the same block drafter weights run by `generate(...,
assistant_model=assistant, speculation_type="dflash")` (transformers >= 5.23).

The contract of transformers' `DFlashTokenCandidateGenerator` (generation/candidate_generator.py): the assistant is
called as `assistant(noise_embeds, context_hidden_states, position_ids, attention_mask, cache=DFlashCache)` and
returns `last_hidden_state`; its config holds `block_size`, `mask_token_id` and `target_layer_ids` (0-based, "the
output of layer l", the same convention as ours); the target's own embeddings and LM head embed the block and score
the drafts, over the target's whole vocabulary. The one model class in transformers that meets it is
`MuseGlimmerAssistantModel`, the DFlash architecture: the same layers as our `BlockDrafter`, with `fc` and
`hidden_norm` renamed `encoder.fc` and `encoder.output_norm_enc` (tests/test_dflash_format.py checks that both
give the same hidden states). So a drafter converts in memory: a config from ours, the backbone tensors renamed,
both as `models/formats/native_dflash.py` writes them to a folder.

What cannot run natively, and why (`native_dflash_refusal`): a drafter with biased attention projections
(transformers' class has none), and drafters whose proposal is more than the backbone (DCOCO and DBLAST heads,
PARD). A drafter with a reduced draft vocabulary runs, but drafts over the full vocabulary there (the native path
scores with the target's whole LM head): output stays exact, acceptance and drafter cost may differ.
"""

from __future__ import annotations

import torch

from ..models.block_drafter import BlockDrafter
from ..models.formats.dflash import dflash_weight_names
from ..models.formats.native_dflash import native_config_kwargs, native_state_dict

SPECULATION_TYPE = "dflash"


def native_dflash_refusal(drafter: torch.nn.Module) -> str | None:
    """Why `drafter` cannot run through transformers' DFlash path, or None when it can."""
    try:
        from transformers import MuseGlimmerAssistantModel  # noqa: F401
        from transformers.generation import DFlashTokenCandidateGenerator  # noqa: F401
    except ImportError:
        import transformers

        return f"transformers {transformers.__version__} has no DFlash path (speculation_type='dflash' needs >= 5.23)"
    if not isinstance(drafter, BlockDrafter):
        return f"{type(drafter).__name__} is not a block drafter: transformers' DFlash path runs block drafters only"
    extra = sorted(set(drafter.state_dict()) - set(dflash_weight_names(drafter.config)) - {"draft_vocab"})
    if extra:
        return (
            f"{type(drafter).__name__} proposes with more than the DFlash backbone ({', '.join(extra[:4])}...); "
            "transformers' DFlash path would run the backbone alone, which is another drafter"
        )
    if drafter.config.attention_bias:
        return "the drafter has biased attention projections; transformers' DFlash assistant has none"
    return None


def native_dflash_assistant(drafter: BlockDrafter, target: torch.nn.Module | None = None) -> torch.nn.Module:
    """transformers' DFlash assistant (`MuseGlimmerAssistantModel`) with `drafter`'s weights, dtype and device.

    `target` supplies the special token ids (only read by generation bookkeeping). Raises ValueError with the reason
    when the drafter cannot run there (`native_dflash_refusal`)."""
    reason = native_dflash_refusal(drafter)
    if reason is not None:
        raise ValueError(f"native DFlash cannot run this drafter: {reason}")
    from transformers import MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel

    special = target.config.get_text_config() if target is not None else None
    config = MuseGlimmerAssistantConfig(
        **native_config_kwargs(drafter.config, special), attn_implementation=drafter.config._attn_implementation
    )
    with torch.device("meta"):
        assistant = MuseGlimmerAssistantModel(config)
    assistant.load_state_dict(native_state_dict(drafter), strict=False, assign=True)
    missing = [n for n, p in assistant.named_parameters() if p.is_meta]
    if missing:
        raise ValueError(f"native DFlash conversion left tensors unset: {missing[:4]}")
    rotary = type(assistant.rotary_emb)
    assistant.rotary_emb = rotary(config)  # computed, not loaded: off the meta device before moving
    assistant = assistant.to(device=drafter.device, dtype=drafter.dtype)
    assistant.rotary_emb = rotary(config).to(drafter.device)  # float32 inv_freq, as the drafter's own rotary keeps it
    return assistant.eval()


__all__ = ["SPECULATION_TYPE", "native_dflash_assistant", "native_dflash_refusal"]
