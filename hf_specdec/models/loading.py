"""Load any hf_specdec drafter by what its checkpoint says it is: a registered kind, a published DFlash
checkpoint, or a LoRA adapter folder (peft, safetensors only) over a base drafter. A PARD folder holds its kind's
config next to its adapter; that kind loads base + adapter itself. A Hub repo holding an adapter is downloaded
whole and loaded as a folder.

`import hf_specdec` first: it registers the drafter kinds with transformers. `transformers.AutoModel` alone does
not know their model types and suggests upgrading transformers, which does not help.

An adapter's base (`base_model_name_or_path` in adapter_config.json) is found wherever the adapter is
(`adapter_base`): as an absolute folder, relative to the adapter folder (how hf_specdec saves it), relative to the
working directory or to a folder above the adapter (where older runs' training ran), as an offline model name, else
as a Hub id.

What is not a drafter (an empty folder, an unknown `model_type`, a plain causal LM) is refused with a message that
says so and lists the kinds and published layouts that load; a config naming an hf_specdec kind that its config
class refuses is refused with that reason and the file's name.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from huggingface_hub import hf_hub_download, snapshot_download
from peft import PeftModel
from transformers import AutoConfig, AutoModel, PreTrainedModel
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from .base_models import offline_models_dir
from .block_drafter import BlockDrafter, BlockDrafterConfig
from .checkpoints import read_config_dict, readable
from .pard import PardConfig
from .peft_probe import quiet_peft_probe
from .registry import (
    DrafterKind,
    head_named,
    kind_for_config,
    kind_for_model_type,
    published_format,
    registered_formats,
    registered_kinds,
)

ADAPTER_CONFIG = "adapter_config.json"
_HUB_KWARGS = ("revision", "cache_dir", "token", "local_files_only", "subfolder")

# model_type saved when a base with a head was a kind of its own -> (that base's config class, the head). Such a
# folder keeps the head's shape at the top level of its config; it loads as the base with the head attached.
SAVED_HEAD_KINDS = {
    "hf_specdec_dcoco": (BlockDrafterConfig, "dcoco"),
    "hf_specdec_dblast": (BlockDrafterConfig, "dblast"),
    "hf_specdec_pard_dcoco": (PardConfig, "dcoco"),
    "hf_specdec_pard_dblast": (PardConfig, "dblast"),
}


def _saved_head_config(model_type: str, base_config: type, head: str) -> type:
    """The config class that reads a `model_type` of `SAVED_HEAD_KINDS`: the base's, with the head's top-level
    fields gathered into `head`."""
    shape_fields = [f.name for f in dataclasses.fields(head_named(head).config_class)]

    def __post_init__(self, **kwargs):
        shape = {name: kwargs.pop(name) for name in shape_fields if name in kwargs}
        if self.head is None:
            self.head = {"type": head, **shape}
        base_config.__post_init__(self, **kwargs)

    name = "".join(part.title() for part in model_type.split("_")) + "Config"
    return type(name, (base_config,), {"model_type": model_type, "__post_init__": __post_init__})


_SAVED_HEAD_CONFIGS = {
    model_type: _saved_head_config(model_type, base_config, head)
    for model_type, (base_config, head) in SAVED_HEAD_KINDS.items()
}
for _model_type, _config_class in _SAVED_HEAD_CONFIGS.items():
    AutoConfig.register(_model_type, _config_class, exist_ok=True)
    # AutoModel.register insists on the model class's own config class; the mapping itself takes an alias
    _base = kind_for_model_type(SAVED_HEAD_KINDS[_model_type][0].model_type).model_class
    AutoModel._model_mapping.register(_config_class, _base, exist_ok=True)


def saved_head_config(model_type: str) -> type:
    """The config class reading configs saved as `model_type` (one of `SAVED_HEAD_KINDS`)."""
    return _SAVED_HEAD_CONFIGS[model_type]


def load_drafter(name_or_path: str | os.PathLike, **kwargs) -> PreTrainedModel:
    """`from_pretrained` of the drafter kind the checkpoint's `model_type` names: a folder or a Hub id.

    Call it after `import hf_specdec` (`hf_specdec.load_drafter` does so): that import registers the drafter kinds;
    `transformers.AutoModel.from_pretrained(folder)` works too after it, never without it.

    Checkpoints in the published z-lab DFlash layout (their config names the target's model type) load as a
    `BlockDrafter`, which converts them. A LoRA adapter (adapter_config.json), in a folder or a Hub repo, loads its
    base drafter with the adapter merged; the base is found from any working directory (`adapter_base`). Without
    `dtype` the drafter keeps the dtype it was saved in, and runs so next to a target of another dtype;
    `dtype=target.dtype` loads it in the target's.
    """
    return _load_drafter(name_or_path, (), kwargs)


def _load_drafter(name_or_path, chain: tuple[str, ...], kwargs: dict) -> PreTrainedModel:
    """`load_drafter`; `chain`: the adapter folders whose bases are being loaded, outermost first."""
    hub = {k: kwargs[k] for k in _HUB_KWARGS if k in kwargs}
    name_or_path = _adapter_snapshot(name_or_path, hub) or name_or_path
    raw = _config_dict(name_or_path, hub)
    config = _checked_config(name_or_path, raw, hub)
    kind = kind_for_config(config) or _published_kind(raw)
    if is_adapter(name_or_path) and not (kind is not None and kind.capabilities.adapter_folders):
        return _load_adapter(name_or_path, None, chain, kwargs)
    if kind is None:
        _refuse_non_drafter(name_or_path, raw)
    if config is not None and config.model_type in SAVED_HEAD_KINDS and "config" not in kwargs:
        kwargs = {**kwargs, "config": config}  # the head's shape sits at the config's top level: read it so
    return (kind.model_class if kind else BlockDrafter).from_pretrained(name_or_path, **kwargs)


def saved_kind(name_or_path: str | os.PathLike, **hub) -> DrafterKind | None:
    """The registered kind whose `model_type` the config of `name_or_path` (a folder or a Hub id) names; None when
    it names none or cannot be read (a DFlash checkpoint, an adapter folder without a config, a missing name)."""
    return kind_for_config(_saved_config(name_or_path, **hub))


def _published_kind(raw: dict | None) -> DrafterKind | None:
    """The base that reads a `config.json` dict in a published layout (`models/formats/`); None for another."""
    published = published_format(raw)
    return None if published is None else kind_for_model_type(published.base_model_type)


def _config_dict(name_or_path, hub: dict) -> dict | None:
    """The `config.json` of `name_or_path` as a dict; None when there is none or it cannot be fetched (a Hub id that
    does not resolve: `from_pretrained` then says why). A local config.json that is not JSON raises, naming it."""
    try:
        return read_config_dict(name_or_path, **hub)
    except (OSError, ValueError):
        if os.path.isfile(os.path.join(name_or_path, "config.json")):
            raise
        return None


def _checked_config(name_or_path, raw: dict | None, hub: dict):
    """`_saved_config`, except that a config naming an hf_specdec kind which its config class refuses raises that
    refusal (a bad mask id, block size, decoding setting, a missing base_config), naming the file."""
    try:
        return AutoConfig.from_pretrained(name_or_path, **hub)
    except (TypeError, ValueError) as err:
        model_type = raw.get("model_type") if isinstance(raw, dict) else None
        if kind_for_model_type(model_type) is None and model_type not in SAVED_HEAD_KINDS:
            return None
        where = Path(name_or_path) / "config.json" if os.path.isdir(name_or_path) else f"{name_or_path}/config.json"
        error = TypeError if isinstance(err, TypeError) else ValueError
        raise error(f"the {model_type} drafter config {where} is unusable: {err}") from err
    except (OSError, KeyError):
        return None


def _refuse_non_drafter(name_or_path, raw: dict | None) -> None:
    """ValueError saying that `name_or_path` is no drafter hf_specdec knows, and what it does load. Returns for a
    name that is neither a local folder nor a readable config (transformers' own error then says why)."""
    if raw is None and not os.path.isdir(name_or_path):
        return
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    hint = ""
    if raw is None:
        files = sorted(os.listdir(name_or_path))
        reason = "it holds no config.json" + (" (the folder is empty)" if not files else f" (it holds {files[:6]})")
    elif not model_type:
        reason = "its config.json names no model_type"
    elif model_type in CONFIG_MAPPING:
        reason = f"its config.json is a plain {model_type!r} model's, not a drafter's"
        hint = (
            " A causal LM of the target's family drafts as a PARD drafter: "
            "`PardDrafter.from_causal_lm(lm, target, mask_token_id=...)` (an AMD PARD-1 folder names its "
            "`pard_token` in config.json)."
        )
    else:
        reason = f"its config.json names model_type {model_type!r}, which no registered drafter kind saves"
    kinds = ", ".join(f"{k.model_type} ({k.model_class.__name__})" for k in registered_kinds())
    formats = ", ".join(f"{f.name} (as {f.base_model_type})" for f in registered_formats())
    raise ValueError(
        f"{name_or_path} is not a drafter hf_specdec can load: {reason}. It loads its own drafter kinds (config.json "
        f"model_type {kinds}; a head saved on one: {', '.join(SAVED_HEAD_KINDS)}), the published layouts {formats}, "
        f"and LoRA adapter folders (adapter_config.json + adapter_model.safetensors).{hint}"
    )


def _saved_config(name_or_path, **hub):
    """The config `name_or_path` saves, read by the class its `model_type` names; None when it cannot be read."""
    try:
        return AutoConfig.from_pretrained(name_or_path, **hub)
    except (OSError, ValueError, KeyError):
        return None


def is_adapter(folder: str | os.PathLike) -> bool:
    return os.path.isfile(os.path.join(folder, ADAPTER_CONFIG))


def _adapter_snapshot(name: str | os.PathLike, hub: dict) -> str | None:
    """The local download of the Hub repo `name` when it holds an adapter (its base is then found as for a folder);
    None for a local path or a repo without one."""
    if os.path.exists(name) or "subfolder" in hub:
        return None
    try:
        hf_hub_download(str(name), ADAPTER_CONFIG, **hub)
    except Exception:  # not a repo id, no adapter there, or no network: load it as transformers would
        return None
    return snapshot_download(str(name), **{k: v for k, v in hub.items() if k != "subfolder"})


def adapter_base(folder: str | os.PathLike, name: str) -> str:
    """Where the base `name` recorded in `folder`'s adapter_config.json is: an absolute folder; a folder relative to
    the adapter folder (as hf_specdec saves it); relative to the working directory or to a folder above the
    adapter (older runs recorded it relative to where training ran); an offline model; else `name` as a Hub id.
    ValueError, naming each place looked at, when `name` is a path that is in none of them."""
    here = Path(folder).resolve()
    relative = Path(os.path.expanduser(name))
    tried = [relative] if relative.is_absolute() else [here / relative, Path.cwd() / relative]
    if not relative.is_absolute():
        tried += [parent / relative for parent in here.parents]
        tried.append(offline_models_dir() / relative)
    for candidate in tried:
        if (candidate / "config.json").is_file() or (candidate / ADAPTER_CONFIG).is_file():
            return str(candidate)
    if relative.is_absolute() or name.startswith((".", "~")) or name.count("/") != 1:
        raise ValueError(
            f"the base drafter {name!r} of the LoRA adapter in {folder} is not there (looked in "
            f"{', '.join(str(t) for t in tried[:4])}{', ...' if len(tried) > 4 else ''}). Copy the base drafter "
            f"beside the adapter, set base_model_name_or_path in {Path(folder) / ADAPTER_CONFIG} to its folder "
            "(relative to the adapter folder) or Hub id, or pass it: load_adapter(folder, base=drafter)."
        )
    return name


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
        where = adapter_base(folder, name)
        try:
            base = _load_drafter(where, (*chain, here), kwargs)
        except OSError as err:
            if where != name:  # a folder that was found but does not load: its own error says why
                raise
            raise ValueError(
                f"the base drafter {name!r} of the LoRA adapter in {folder} is neither a folder (relative to the "
                f"adapter folder, the working directory or a folder above the adapter) nor a loadable Hub repo "
                f"({err}). Set base_model_name_or_path in {Path(folder) / ADAPTER_CONFIG} to the base's folder "
                "(relative to the adapter folder) or Hub id, or pass it: load_adapter(folder, base=drafter)."
            ) from err
    with readable(Path(folder) / "adapter_model.safetensors", "the LoRA adapter"), quiet_peft_probe():
        return PeftModel.from_pretrained(base, str(folder)).merge_and_unload()


__all__ = [
    "ADAPTER_CONFIG",
    "SAVED_HEAD_KINDS",
    "saved_head_config",
    "adapter_base",
    "is_adapter",
    "load_adapter",
    "load_drafter",
    "saved_kind",
]
