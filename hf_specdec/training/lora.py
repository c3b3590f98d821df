"""LoRA adapters on a drafter (peft): add, save adapter-only, merge, load back.

Adapters go in place into the drafter's own modules, so the trainers keep using the drafter object unchanged;
a DCOCO corrector or DBLAST mixture head (small, new) is trained whole (`modules_to_save`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model

from ..drafting.modeling_block_drafter import BlockDrafter
from .config import DrafterTrainingConfig

ADAPTER_CONFIG = "adapter_config.json"
HEADS = ("corrector", "mixture_head")


def add_lora(drafter: BlockDrafter, config: DrafterTrainingConfig, base_name_or_path: str | None) -> PeftModel:
    """Put rank-`lora_rank` adapters on `lora_target_modules` of `drafter` (in place); only they (and a head the
    drafter has) train. `base_name_or_path` is recorded in the adapter config for loading it back."""
    names = {name.rsplit(".", 1)[-1] for name, _ in drafter.named_modules()}
    unknown = set(config.lora_target_modules) - names
    if unknown:
        raise ValueError(
            f"lora_target_modules {sorted(unknown)} are not modules of this drafter; choose from linear layers such "
            "as q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, fc"
        )
    lora = LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=list(config.lora_target_modules),
        modules_to_save=[h for h in HEADS if hasattr(drafter, h)] or None,
    )
    torch.manual_seed(config.seed)  # adapter init (lora_A) is random: the same run gives the same adapters
    model = get_peft_model(drafter, lora)
    model.peft_config["default"].base_model_name_or_path = base_name_or_path
    return model


def save_adapter(model: PeftModel, folder: str | os.PathLike) -> Path:
    """Adapter weights and config only (safetensors)."""
    model.save_pretrained(folder, safe_serialization=True)
    return Path(folder)


def merge_lora(model: PeftModel) -> BlockDrafter:
    """The drafter with the adapters folded into its weights (a plain drafter again)."""
    return model.merge_and_unload()


def is_adapter(folder: str | os.PathLike) -> bool:
    return (Path(folder) / ADAPTER_CONFIG).is_file()


def load_adapter(folder: str | os.PathLike, base: BlockDrafter | None = None, **kwargs) -> BlockDrafter:
    """Load `base` (default: the drafter the adapter config names) with the adapter in `folder`, merged."""
    from ..drafting.loading import load_drafter

    if not (Path(folder) / "adapter_model.safetensors").is_file():
        raise ValueError(
            f"{folder} has no adapter_model.safetensors; only safetensors adapters are loaded (a pickled "
            "adapter_model.bin runs code when loaded). Re-save it with save_pretrained(safe_serialization=True)."
        )
    if base is None:
        name = json.loads((Path(folder) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
        if not name:
            raise ValueError(f"{folder} is a LoRA adapter without base_model_name_or_path; pass the base drafter")
        base = load_drafter(name, **kwargs)
    return PeftModel.from_pretrained(base, str(folder)).merge_and_unload()


__all__ = ["add_lora", "is_adapter", "load_adapter", "merge_lora", "save_adapter"]
