"""Load any hf_specdec drafter by what its checkpoint says it is: a registered kind, a published DFlash
checkpoint, or a LoRA adapter folder (peft, safetensors only) over a base drafter. A PARD folder holds its kind's
config next to its adapter; that kind loads base + adapter itself."""

from __future__ import annotations

import json
import os
from pathlib import Path

from peft import PeftModel
from transformers import AutoConfig, PreTrainedModel

from .block_drafter import BlockDrafter
from .registry import kind_for_model_type

ADAPTER_CONFIG = "adapter_config.json"
_HUB_KWARGS = ("revision", "cache_dir", "token", "local_files_only", "subfolder")


def load_drafter(name_or_path: str | os.PathLike, **kwargs) -> PreTrainedModel:
    """`from_pretrained` of the drafter kind the checkpoint's `model_type` names.

    Checkpoints in the published z-lab DFlash layout (their config names the target's model type) load as a
    `BlockDrafter`, which converts them. A local LoRA adapter folder (adapter_config.json) loads its base drafter
    with the adapter merged.
    """
    return _load_drafter(name_or_path, (), kwargs)


def _load_drafter(name_or_path, chain: tuple[str, ...], kwargs: dict) -> PreTrainedModel:
    """`load_drafter`; `chain`: the adapter folders whose bases are being loaded, outermost first."""
    hub = {k: kwargs[k] for k in _HUB_KWARGS if k in kwargs}
    try:
        model_type = AutoConfig.from_pretrained(name_or_path, **hub).model_type
    except (OSError, ValueError, KeyError):
        model_type = None
    kind = kind_for_model_type(model_type)
    if is_adapter(name_or_path) and not hasattr(getattr(kind, "model_class", None), "from_adapter_folder"):
        return _load_adapter(name_or_path, None, chain, kwargs)
    return (kind.model_class if kind else BlockDrafter).from_pretrained(name_or_path, **kwargs)


def is_adapter(folder: str | os.PathLike) -> bool:
    return os.path.isfile(os.path.join(folder, ADAPTER_CONFIG))


def load_adapter(folder: str | os.PathLike, base: PreTrainedModel | None = None, **kwargs) -> PreTrainedModel:
    """Load `base` (default: the drafter the adapter config names) with the adapter in `folder`, merged."""
    return _load_adapter(folder, base, (), kwargs)


def _load_adapter(folder, base: PreTrainedModel | None, chain: tuple[str, ...], kwargs: dict) -> PreTrainedModel:
    if not (Path(folder) / "adapter_model.safetensors").is_file():
        raise ValueError(
            f"{folder} has no adapter_model.safetensors; only safetensors adapters are loaded (a pickled "
            "adapter_model.bin runs code when loaded). Re-save it with save_pretrained(safe_serialization=True)."
        )
    here = os.path.realpath(folder)
    if here in chain:
        loop = " -> ".join([*chain[chain.index(here) :], here])
        raise ValueError(
            f"the LoRA adapter chain loops back on itself ({loop}): an adapter's base_model_name_or_path must name "
            f"the drafter it was trained on, not an adapter of this chain. Fix base_model_name_or_path in "
            f"{Path(folder) / ADAPTER_CONFIG}, or pass the base drafter: load_adapter(folder, base=drafter)."
        )
    if base is None:
        name = json.loads((Path(folder) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
        if not name:
            raise ValueError(f"{folder} is a LoRA adapter without base_model_name_or_path; pass the base drafter")
        base = _load_drafter(name, (*chain, here), kwargs)
    return PeftModel.from_pretrained(base, str(folder)).merge_and_unload()


__all__ = ["ADAPTER_CONFIG", "is_adapter", "load_adapter", "load_drafter"]
