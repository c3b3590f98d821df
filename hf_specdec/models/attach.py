"""One way to put a head on any base, save the head alone, and load it back (docs/heads.md).

    drafter = attach_head(pard_drafter, "dblast", mixture_components=8)   # a fresh head, drafting as the base does
    save_head(drafter, "out/head", backbone="../pard")                     # config + head.safetensors only
    drafter = load_head_folder("out/head")                                 # the base it names, with the head on top

A drafter with a head is an instance of its base's class whose config's `head` names the head and its shape; the
head module lives under the head's attribute (its weights' prefix), so the drafter saves, loads and moves like any
model. `attach_head` returns a new drafter over the SAME backbone weights (shared, not copied): the base object
stays as it was, without the head.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, PreTrainedModel

from .base_models import resolve_base_model
from .registry import build_head, check_head, head_named, head_of, kind_for_config

HEAD_WEIGHTS = "head.safetensors"  # a head saved alone (its config names the drafter under it: `backbone`)


def attach_head(drafter: PreTrainedModel, head: str, **shape) -> PreTrainedModel:
    """`drafter` (a registered base, without a head) with a fresh `head` (a registered head's name) of `shape`
    (its config fields; the head's defaults otherwise) on top. The backbone's weights are shared, not copied."""
    if kind_for_config(getattr(drafter, "config", None)) is None:
        raise TypeError(f"{type(drafter).__name__} is not a registered drafter base; a head goes on a drafter")
    carried = head_of(drafter)
    if carried is not None:
        raise ValueError(
            f"this drafter already carries a {carried.name} head; attach {head!r} to the drafter under it instead"
        )
    spec = head_named(head)
    twin = _sharing_backbone(drafter)
    twin.config.head = {"type": spec.name, **vars(spec.shape(shape))}
    try:
        check_head(twin.config)
    except ValueError:
        twin.config.head = None
        raise
    build_head(twin).to(device=drafter.device, dtype=drafter.dtype)
    return twin


def _sharing_backbone(drafter: PreTrainedModel) -> PreTrainedModel:
    """A shallow twin of `drafter`: the same parameters and buffers, its own tables (modules, parameters, buffers,
    hooks) and config, so that a head or a hook added to the twin is not added to `drafter`."""
    twin = copy.copy(drafter)
    for name, table in vars(drafter).items():
        if isinstance(table, dict):
            setattr(twin, name, table.copy())
    for name in ("budget_memory", "last_acceptance_stats"):  # what decoding learnt of the base's own drafts
        twin.__dict__.pop(name, None)
    twin.config = copy.deepcopy(drafter.config)
    if getattr(drafter, "generation_config", None) is not None:
        twin.generation_config = copy.deepcopy(drafter.generation_config)
    return twin


def head_state_dict(drafter: PreTrainedModel) -> dict[str, torch.Tensor]:
    """The weights of `drafter`'s head, by their names in the drafter (`<attr>.<name>`)."""
    spec = head_of(drafter)
    if spec is None:
        raise ValueError(f"this {type(drafter).__name__} carries no head to save alone; use save_pretrained")
    return {k: v for k, v in drafter.state_dict().items() if k.split(".", 1)[0] == spec.attr}


def save_head(drafter: PreTrainedModel, folder: str | Path, backbone: str) -> None:
    """Save the head alone: the drafter's config naming `backbone` (the folder or Hub id of the drafter underneath;
    a relative folder is read relative to `folder`) and the head's weights."""
    weights = {k: v.detach().cpu().contiguous() for k, v in head_state_dict(drafter).items()}
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    drafter.config.backbone = str(backbone)
    try:
        drafter.config.save_pretrained(folder)
    finally:
        drafter.config.backbone = None
    save_file(weights, str(folder / HEAD_WEIGHTS))


def is_head_folder(folder: str | Path) -> bool:
    """Whether `folder` holds a head saved alone (and no full weights)."""
    folder = Path(folder)
    return (folder / HEAD_WEIGHTS).is_file() and not any(folder.glob("model*.safetensors"))


def load_head_folder(folder: str | Path, dtype=None, device_map=None) -> PreTrainedModel:
    """The drafter `backbone` names, with the head saved in `folder` on top (see `save_head`)."""
    folder = Path(folder)
    config = AutoConfig.from_pretrained(folder)
    kind = kind_for_config(config)
    spec = head_of(config)
    if kind is None or spec is None:
        raise ValueError(f"{folder} holds {HEAD_WEIGHTS} but its config.json names no drafter base with a head")
    name = kind.model_class.__name__
    if not config.backbone:
        raise ValueError(f"{folder} holds a head ({HEAD_WEIGHTS}) but its config names no backbone {name}")
    beside = folder / config.backbone
    where = str(beside) if (beside / "config.json").is_file() else resolve_base_model(config.backbone, folder)
    if not Path(where).is_dir() and (config.backbone.startswith(".") or Path(config.backbone).is_absolute()):
        raise OSError(
            f"the {name} this head sits on ({config.backbone!r}, named as backbone in {folder}/config.json) "
            f"is not there (looked beside the head, in the working directory and in folders above the head). "
            "Put it there, or set backbone to its folder (relative to the head's folder) or Hub id."
        )
    backbone = kind.model_class.from_pretrained(where, dtype=dtype, device_map=device_map)
    shape = {k: v for k, v in config.head.items() if k != "type"}
    model = attach_head(backbone, spec.name, **shape)
    if getattr(config, "decoding", None) is not None:
        model.config.decoding = config.decoding
    weights = load_file(str(folder / HEAD_WEIGHTS))
    expected = set(head_state_dict(model))
    if set(weights) != expected:
        raise ValueError(f"{folder / HEAD_WEIGHTS} holds {sorted(weights)}, expected {sorted(expected)}")
    model.load_state_dict(weights, strict=False)
    return model


__all__ = ["HEAD_WEIGHTS", "attach_head", "head_state_dict", "is_head_folder", "load_head_folder", "save_head"]
