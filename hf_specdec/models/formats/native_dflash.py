"""transformers' native DFlash layout (`model_type: "muse_glimmer_assistant"`): reading it into a `BlockDrafter`
and writing a drafter out in it.

Read from the code that defines the layout, installed transformers 5.24.0:
`models/muse_glimmer_assistant/configuration_muse_glimmer_assistant.py` (the config and its defaults),
`models/muse_glimmer_assistant/modeling_muse_glimmer_assistant.py` (`MuseGlimmerAssistantModel`: tensor names,
the sliding-window mask), `generation/candidate_generator.py` (`DFlashTokenCandidateGenerator`: the top-level
`block_size`, `mask_token_id`, `target_layer_ids`, read as z-lab's 0-based "output of layer l", i.e.
`hidden_states[l + 1]`), `masking_utils.py` and `cache_utils.py` (`DFlashCache`: the window's offsets).

The layout: a `config.json` that `MuseGlimmerAssistantConfig` reads, and `model.safetensors` with the DFlash
backbone under our names except two: `encoder.fc.weight` (H, L*H) is our `fc.weight` and
`encoder.output_norm_enc.weight` (H,) our `hidden_norm.weight`; `layers.N.*` and `norm.weight` are the same. No
embeddings, no LM head, no attention biases (the target's embeddings and LM head are used, the whole vocabulary).

Reading honours the class's own defaults for every omitted key, by reading the dict with
`MuseGlimmerAssistantConfig` itself: sliding-window layers (`layer_types = ["sliding_attention"] * n`,
`sliding_window = 2048`), RoPE theta 5e5, `rms_norm_eps` 1e-5, `head_dim` 128, `block_size` 16, mask id 201818,
taps [1, 13, 25, 37, 49]. Sliding layers run with transformers' bidirectional window (`BlockDrafterConfig`). The
layout names no target: the extra keys `vocab_size` and `num_target_layers`, which the class keeps and this writer
writes, record it when present (the target check at `generate` reads them).

Writing: `export_native_dflash` gives a folder `transformers.AutoModel.from_pretrained` reads as
`MuseGlimmerAssistantModel` (in a process that did not import hf_specdec; after `import hf_specdec`, AutoModel reads
published drafter layouts as hf_specdec drafters, `models/auto_model.py`), for
`target.generate(assistant_model=..., speculation_type="dflash")`. vLLM also maps these names (`encoder.fc.` ->
`fc.`, vllm `vllm/model_executor/models/qwen3_dflash.py` @ 036a00d) but runs sliding layers causally within the
block by default (`_dflash_layer_causal`), which is not what transformers does: a drafter with sliding layers drafts
differently there.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from transformers import MuseGlimmerAssistantConfig, PretrainedConfig, PreTrainedModel

from ..block_drafter.configuration_block_drafter import LAYER_TYPES, BlockDrafterConfig
from ..registry import PublishedFormat, register_format
from ..target_features import check_drafter_matches_target
from .dflash import check_block_drafter, dflash_weight_names, write_layout

logger = logging.getLogger(__name__)

NATIVE_MODEL_TYPE = MuseGlimmerAssistantConfig.model_type  # "muse_glimmer_assistant"
NATIVE_ARCHITECTURE = "MuseGlimmerAssistantModel"
RENAMED = {"fc.weight": "encoder.fc.weight", "hidden_norm.weight": "encoder.output_norm_enc.weight"}  # ours -> native
KEY_MAPPING = {r"^encoder\.fc\.": "fc.", r"^encoder\.output_norm_enc\.": "hidden_norm."}  # native -> ours, on load
_SHAPE_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "rms_norm_eps",
    "attention_dropout",
    "max_position_embeddings",
)


def is_native_dflash_config(config: dict) -> bool:
    return config.get("model_type") == NATIVE_MODEL_TYPE


def block_drafter_config_from_native(config: dict) -> BlockDrafterConfig:
    """Translate a native DFlash `config.json` dict into a `BlockDrafterConfig`, with the native class's defaults."""
    native = MuseGlimmerAssistantConfig.from_dict(config)  # omitted keys get transformers' own defaults
    unknown = sorted(set(native.layer_types) - set(LAYER_TYPES))
    if unknown:
        raise ValueError(
            f"this native DFlash drafter has layers of type {unknown} (layer_types {native.layer_types}); "
            f"hf_specdec's block drafter implements {list(LAYER_TYPES)} only and does not load it rather than draft "
            "with other attention."
        )
    return BlockDrafterConfig(
        **{k: getattr(native, k) for k in _SHAPE_FIELDS},
        attention_bias=False,  # MuseGlimmerAssistantAttention's projections have no bias
        rope_parameters=dict(native.rope_parameters),
        layer_types=list(native.layer_types),
        sliding_window=native.sliding_window,
        block_size=native.block_size,
        mask_token_id=native.mask_token_id,
        target_layer_ids=list(native.target_layer_ids),
        target_hidden_size=native.hidden_size,  # encoder.fc reads len(target_layer_ids) * hidden_size features
        target_num_hidden_layers=config.get("num_target_layers"),
        target_vocab_size=config.get("vocab_size"),
        target_name_or_path=config.get("target_model_name_or_path") or config.get("base_model"),
    )


def native_config_kwargs(config: BlockDrafterConfig, special: PretrainedConfig | None = None) -> dict:
    """`MuseGlimmerAssistantConfig` keyword arguments of a drafter's config, every field given (the class's defaults
    are another model's). `special`: the config whose bos/eos/pad ids generation bookkeeping reads (the target's)."""
    rope = dict(config.rope_parameters or {"rope_type": "default", "rope_theta": BlockDrafterConfig.default_theta})
    return {
        **{k: getattr(config, k) for k in _SHAPE_FIELDS},
        "rope_parameters": rope,
        "layer_types": list(config.layer_types),
        **({"sliding_window": config.sliding_window} if config.sliding_window is not None else {}),
        "block_size": config.block_size,
        "mask_token_id": config.mask_token_id,
        "target_layer_ids": list(config.target_layer_ids),
        **{k: getattr(special, k, None) for k in ("bos_token_id", "eos_token_id", "pad_token_id")},
    }


def native_export_refusal(config: BlockDrafterConfig) -> str | None:
    """Why a block drafter of this config cannot be written in the native layout, or None when it can."""
    if config.attention_bias:
        return "the drafter has biased attention projections; transformers' MuseGlimmerAssistantModel has none"
    if config.draft_vocab_size is not None:
        return (
            f"the drafter scores a {config.draft_vocab_size}-token draft vocabulary and the native layout has no place "
            "for one (transformers scores the target's whole LM head); export it as 'dflash' or 'speculators', which "
            "keep it (d2t/t2d)"
        )
    return None


def native_state_dict(drafter) -> dict[str, torch.Tensor]:
    """The drafter's DFlash backbone under native names (tensors as they are: device, dtype)."""
    state = drafter.state_dict()
    return {RENAMED.get(name, name): state[name] for name in dflash_weight_names(drafter.config)}


def export_native_dflash(drafter, out_dir: str | os.PathLike, target: PreTrainedModel | None = None) -> Path:
    """Write `drafter` to `out_dir` in transformers' native DFlash layout (`config.json` + `model.safetensors`).

    `target` (optional) is checked against the drafter and gives the config its special token ids. Only the block
    backbone is written (a DCOCO/DBLAST head is not part of the layout; a warning says so). Raises ValueError for a
    drafter the layout cannot hold (`native_export_refusal`)."""
    check_block_drafter(drafter)
    cfg = drafter.config
    reason = native_export_refusal(cfg)
    if reason is not None:
        raise ValueError(f"cannot export this drafter in transformers' native DFlash layout: {reason}.")
    if target is not None:
        check_drafter_matches_target(cfg, target)
    backbone = set(dflash_weight_names(cfg)) | {"draft_vocab"}
    extra = sorted({name.split(".")[0] for name in drafter.state_dict() if name not in backbone})
    if extra:
        logger.warning(
            "exporting only the block backbone of this %s: %s is not part of the native DFlash layout, so "
            "transformers drafts with the backbone alone",
            type(drafter).__name__,
            ", ".join(extra),
        )
    special = target.config.get_text_config() if target is not None else None
    native = MuseGlimmerAssistantConfig(**native_config_kwargs(cfg, special), architectures=[NATIVE_ARCHITECTURE])
    out = native.to_diff_dict()
    out |= native_config_kwargs(cfg, special)  # explicit even where equal to the class's defaults
    out |= {"model_type": NATIVE_MODEL_TYPE, "dtype": str(drafter.dtype).removeprefix("torch.")}
    target_vocab = cfg.target_vocab_size or cfg.vocab_size
    out |= {"vocab_size": target_vocab} if target_vocab is not None else {}
    out |= {"num_target_layers": cfg.target_num_hidden_layers} if cfg.target_num_hidden_layers else {}
    tensors = {name: t.detach().cpu().contiguous() for name, t in native_state_dict(drafter).items()}
    return write_layout(out_dir, out, tensors, sort_keys=True)


def _after_load(model, path, hub: dict) -> tuple[bool, set[str]]:
    return False, set()  # nothing kept its own way: the two renamed tensors load through KEY_MAPPING


FORMAT = register_format(
    PublishedFormat(
        name="native-dflash",
        base_model_type=BlockDrafterConfig.model_type,
        recognises=is_native_dflash_config,
        to_config=block_drafter_config_from_native,
        after_load=_after_load,
        key_mapping=KEY_MAPPING,
    )
)

__all__ = [
    "FORMAT",
    "KEY_MAPPING",
    "NATIVE_ARCHITECTURE",
    "NATIVE_MODEL_TYPE",
    "RENAMED",
    "block_drafter_config_from_native",
    "export_native_dflash",
    "is_native_dflash_config",
    "native_config_kwargs",
    "native_export_refusal",
    "native_state_dict",
]
