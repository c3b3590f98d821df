"""LoRA adapters on a drafter (peft): add, save adapter-only, merge, load back.

Adapters go in place into the drafter's own modules, so the trainers keep using the drafter object unchanged;
a DCOCO corrector, DBLAST mixture head or PARD feature projection (small, new) is trained whole
(`modules_to_save`), and a PARD drafter's mask-token embedding row is trained too (`trainable_token_indices`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model

from ..models.block_drafter.modeling_block_drafter import BlockDrafter
from ..models.peft_probe import quiet_peft_probe
from ..models.registry import capabilities_of, registered_heads
from .config import DrafterTrainingConfig

FEATURE_PROJ = "feature_proj"  # a base's small new module, trained whole (as every head's module is)


def trained_whole() -> list[str]:
    """Modules LoRA training updates whole (`modules_to_save`): every head's and a base's feature projection."""
    return [head.attr for head in registered_heads()] + [FEATURE_PROJ]


def add_lora(
    drafter: BlockDrafter,
    config: DrafterTrainingConfig,
    base_name_or_path: str | None,
    continue_from: str | os.PathLike | None = None,
) -> PeftModel:
    """Put rank-`lora_rank` adapters on `lora_target_modules` of `drafter` (in place); only they (and a head the
    drafter has) train. `base_name_or_path` is recorded in the adapter config for loading it back. With
    `continue_from` (a saved adapter folder for this drafter) its adapters go on instead, trainable, with the
    settings they were saved with; `lora_rank` must be theirs."""
    if continue_from is not None:
        return continue_lora(drafter, config, continue_from)
    names = {name.rsplit(".", 1)[-1] for name, _ in drafter.named_modules()}
    unknown = set(config.lora_target_modules) - names
    if unknown:
        raise ValueError(
            f"lora_target_modules {sorted(unknown)} are not modules of this drafter; choose from linear layers such "
            "as q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, fc"
        )
    caps = capabilities_of(drafter)
    lora = LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=list(config.lora_target_modules),
        modules_to_save=[m for m in trained_whole() if getattr(drafter, m, None) is not None] or None,
        # a PARD drafter's mask token: its embedding row trains beside the adapters
        trainable_token_indices=drafter.trainable_token_indices if caps.trainable_token_rows else None,
    )
    torch.manual_seed(config.seed)  # adapter init (lora_A) is random: the same run gives the same adapters
    with quiet_peft_probe():
        model = get_peft_model(drafter, lora)
    model.peft_config["default"].base_model_name_or_path = base_name_or_path
    return model


def continue_lora(drafter: BlockDrafter, config: DrafterTrainingConfig, folder: str | os.PathLike) -> PeftModel:
    """The adapters saved in `folder` on `drafter` (in place), trainable (see `add_lora`)."""
    saved = LoraConfig.from_pretrained(str(folder))
    if saved.r != config.lora_rank:
        raise ValueError(
            f"--drafter {folder} is a LoRA adapter of rank {saved.r}, which this run trains on; --lora_rank "
            f"{config.lora_rank} asks for another rank. Pass --lora_rank {saved.r}, or --lora_rank 0 to fine-tune "
            "the merged drafter whole"
        )
    with quiet_peft_probe():
        model = PeftModel.from_pretrained(drafter, str(folder), is_trainable=True)
    features = getattr(drafter, FEATURE_PROJ, None)  # added to a drafter whose adapter had none: trained whole,
    if features is not None and FEATURE_PROJ not in (saved.modules_to_save or ()):  # saved beside the adapter
        features.requires_grad_(True)
    return model


def continued_lora_adjustments(config: DrafterTrainingConfig, folder: str | os.PathLike) -> list[str]:
    """Sentences for the run's `adjustments`: LoRA settings of this run that the adapter saved in `folder` (which
    the run trains on, `continue_lora`) overrides, since an adapter trained on keeps its scaling and its modules."""
    saved = LoraConfig.from_pretrained(str(folder))
    asked = {
        "lora_alpha": (float(config.lora_alpha), float(saved.lora_alpha)),
        "lora_dropout": (float(config.lora_dropout), float(saved.lora_dropout)),
        "lora_target_modules": (sorted(config.lora_target_modules), _names(saved.target_modules)),
    }
    return [
        f"--{name} {wanted} was not applied: the adapter in {folder}, which this run trains on, keeps its {kept}"
        for name, (wanted, kept) in asked.items()
        if wanted != kept
    ]


def _names(targets) -> list[str] | str:
    """peft's `target_modules` comparable with a sorted list of names: a set or list sorted, a regular expression
    (one string) as it is."""
    return targets if isinstance(targets, str) else sorted(targets or [])


def save_adapter(model: PeftModel, folder: str | os.PathLike) -> Path:
    """Adapter weights and config only (safetensors). A base drafter that is a local folder is recorded relative to
    `folder` (e.g. `../drafter`), so `load_drafter(folder)` finds it from any working directory and after the runs
    folder moved."""
    folder = Path(folder)
    model.save_pretrained(folder, safe_serialization=True)
    config_file = folder / "adapter_config.json"
    config = json.loads(config_file.read_text())
    base = config.get("base_model_name_or_path")
    if base and Path(base).expanduser().is_dir():
        config["base_model_name_or_path"] = os.path.relpath(Path(base).expanduser().resolve(), folder.resolve())
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True))
    return folder


def merge_lora(model: PeftModel) -> BlockDrafter:
    """The drafter with the adapters folded into its weights (a plain drafter again)."""
    return model.merge_and_unload()


__all__ = ["add_lora", "continue_lora", "continued_lora_adjustments", "merge_lora", "save_adapter"]
