"""Load any hf_specdec drafter by what its checkpoint says it is (block drafter, DCOCO, published DFlash)."""

from __future__ import annotations

import os

from transformers import AutoConfig

from .configuration_block_drafter import BlockDrafterConfig
from .configuration_dblast import DBLASTConfig
from .configuration_dcoco import DCOCOConfig
from .modeling_block_drafter import BlockDrafter
from .modeling_dblast import DBLASTDrafter
from .modeling_dcoco import DCOCODrafter

_CLASSES = {
    BlockDrafterConfig.model_type: BlockDrafter,
    DCOCOConfig.model_type: DCOCODrafter,
    DBLASTConfig.model_type: DBLASTDrafter,
}


def load_drafter(name_or_path: str | os.PathLike, **kwargs) -> BlockDrafter:
    """`from_pretrained` of the drafter class the checkpoint's `model_type` names.

    Checkpoints in the published z-lab DFlash layout (their config names the target's model type) load as a
    `BlockDrafter`, which converts them. A local LoRA adapter folder (adapter_config.json) loads its base drafter
    with the adapter merged.
    """
    if os.path.isfile(os.path.join(name_or_path, "adapter_config.json")):  # a LoRA adapter over a base drafter
        from ..training.lora import load_adapter

        return load_adapter(name_or_path, **kwargs)
    hub = {k: kwargs[k] for k in ("revision", "cache_dir", "token", "local_files_only", "subfolder") if k in kwargs}
    try:
        model_type = AutoConfig.from_pretrained(name_or_path, **hub).model_type
    except (OSError, ValueError, KeyError):
        model_type = None
    return _CLASSES.get(model_type, BlockDrafter).from_pretrained(name_or_path, **kwargs)


__all__ = ["load_drafter"]
