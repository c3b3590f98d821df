"""Reading published DFlash checkpoints (the z-lab layout) and guarding checkpoint loads.

A z-lab DFlash checkpoint is a Qwen3-style `config.json` (`"architectures": ["DFlashDraftModel"]`) with
`block_size`, `num_target_layers` and a `dflash_config` holding `mask_token_id` and `target_layer_ids`, plus
weights named `fc`, `hidden_norm`, `layers.N.self_attn.{q,k,v,o}_proj`, `q_norm`, `k_norm`, `layers.N.mlp.*`
and `norm`. Our `BlockDrafter` uses the same weight names, so only the config needs translating; the weights
load as they are and no remote code runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from safetensors import SafetensorError
from transformers.utils import cached_file

from .configuration_block_drafter import BlockDrafterConfig

_ARCH_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "rms_norm_eps",
    "attention_bias",
    "max_position_embeddings",
)


def is_dflash_config(config: dict) -> bool:
    return isinstance(config.get("dflash_config"), dict)


def block_drafter_config_from_dflash(config: dict) -> BlockDrafterConfig:
    """Translate a z-lab DFlash `config.json` dict into a `BlockDrafterConfig`."""
    dflash = config["dflash_config"]
    missing = [k for k in ("mask_token_id", "target_layer_ids") if dflash.get(k) is None]
    if missing or "block_size" not in config:
        raise ValueError(
            f"DFlash config lacks {missing + ([] if 'block_size' in config else ['block_size'])}: "
            "a DFlash checkpoint needs `block_size` and `dflash_config.{mask_token_id,target_layer_ids}`."
        )
    fields = {k: config[k] for k in _ARCH_FIELDS if config.get(k) is not None}
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    rope = {"rope_type": rope.get("rope_type", rope.get("type", "default")), **rope}
    rope.setdefault("rope_theta", config.get("rope_theta", BlockDrafterConfig.default_theta))
    return BlockDrafterConfig(
        **fields,
        rope_parameters=rope,
        block_size=config["block_size"],
        mask_token_id=dflash["mask_token_id"],
        target_layer_ids=list(dflash["target_layer_ids"]),
        target_num_hidden_layers=config.get("num_target_layers"),
        target_vocab_size=config.get("vocab_size"),
        target_hidden_size=config.get("hidden_size"),
        target_name_or_path=config.get("target_model_name_or_path") or config.get("base_model"),
    )


def config_from_dflash_checkpoint(path: str | os.PathLike, **hub_kwargs) -> BlockDrafterConfig | None:
    """The translated config if `path` holds a DFlash-layout checkpoint, else None (our own format)."""
    config_file = cached_file(str(path), "config.json", _raise_exceptions_for_missing_entries=False, **hub_kwargs)
    if config_file is None:
        return None
    with open(config_file, encoding="utf-8") as f:
        try:
            config = json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(f"{config_file} is not valid JSON ({err}); re-save or re-download the drafter.") from err
    return block_drafter_config_from_dflash(config) if is_dflash_config(config) else None


def load_checked(load: Callable, path, *args, **kwargs):
    """Call a `from_pretrained` with safetensors only, turning a damaged weight file into a clear error."""
    kwargs.setdefault("use_safetensors", True)
    try:
        return load(path, *args, **kwargs)
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        text = str(err)
        if isinstance(err, SafetensorError) or "deserializ" in text.lower() or "header" in text.lower():
            first_line = text.splitlines()[0] if text else type(err).__name__
            raise ValueError(
                f"the drafter checkpoint at {path!s} could not be read: its safetensors file is corrupt or "
                f"truncated ({first_line}). Re-download it or save it again with `save_pretrained`."
            ) from err
        raise


__all__ = ["block_drafter_config_from_dflash", "config_from_dflash_checkpoint", "is_dflash_config", "load_checked"]
