"""What a model card states of a drafter's kind: its template in `hub_cards/`, and the facts its saved config and
folder give.

The templates are in `hub_cards/`, beside the hf_specdec package folder: the repository's root in a source checkout
or an editable install, site-packages in a wheel (pyproject.toml ships them as package data of `hf_specdec` by a
path one level up, which installs them there). `drafter.md.j2` holds the sections every card has; a base's own
template extends it with what is true of that kind (`block_drafter.md.j2`, `pard.md.j2`, chosen by the base's
class), and `head.md.j2` adds what is true of a head.

The facts (`kind_facts`) come from what the code declares and the folder holds, not from the kind's name: whether the
drafter has its own LM head (`Capabilities.own_embeddings`), whether it reads the target's hidden states (a block
drafter always, a drafter with its own LM head only with `feature_injection`), the target shape `generate()`
checks (`models/target_features.check_drafter_matches_target`), adapter or full weights, and the backbone a head
saved alone needs.
"""

from __future__ import annotations

import re
from pathlib import Path

import jinja2

from ..models.loading import SAVED_HEAD_KINDS
from ..models.registry import KindCard, card_for, head_named, kind_for_model_type, registered_heads

TEMPLATES = "hub_cards"  # the folder, beside the hf_specdec package folder
TEMPLATE = "drafter.md.j2"  # the sections every card has; the template of a kind without one of its own
# A base class (or a class built on it) -> its template in hub_cards/ and the Hub tags of its method.
KIND_TEMPLATES = {"PardDrafter": ("pard.md.j2", ()), "BlockDrafter": ("block_drafter.md.j2", ("dflash",))}
DEFAULT_LICENSE = "apache-2.0"  # the license hf_specdec itself declares (pyproject.toml)
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def is_hub_id(name: str | None) -> bool:
    """True for a Hub model id `namespace/name`; False for a local filesystem path or nothing."""
    return bool(name) and HUB_ID.fullmatch(name) is not None and ".." not in name and "--" not in name


def head_name(config: dict) -> str | None:
    """The name of the head a saved drafter's config says it carries (None for a bare base)."""
    if config.get("model_type") in SAVED_HEAD_KINDS:
        return SAVED_HEAD_KINDS[config["model_type"]][1]
    head = config.get("head")
    return head.get("type") if isinstance(head, dict) else None


def base_model_type(config: dict) -> str:
    """The `model_type` of the base a saved config's drafter is (a saved head kind's base's, for those)."""
    model_type = config.get("model_type", "hf_specdec_block_drafter")
    return SAVED_HEAD_KINDS[model_type][0].model_type if model_type in SAVED_HEAD_KINDS else model_type


def kind_card(config: dict) -> tuple[str, KindCard]:
    """(the drafter's base class name, card text) of a saved drafter's config: its base's, with its head's when it
    carries one (also in a format saved when a base with a head was a kind of its own); a generic text for others."""
    head = head_name(config)
    return card_for(base_model_type(config), {"type": head} if head else None) or (
        "BlockDrafter",
        KindCard("A parallel block drafter"),
    )


def kind_template(config: dict) -> tuple[str, tuple[str, ...]]:
    """(the template in hub_cards/, extra Hub tags) of a saved drafter's config: its base class's own, else the one
    every card extends."""
    kind = kind_for_model_type(base_model_type(config))
    for cls in kind.model_class.__mro__ if kind else ():
        if cls.__name__ in KIND_TEMPLATES:
            return KIND_TEMPLATES[cls.__name__]
    return TEMPLATE, ()


def templates_dir() -> Path:
    """`hub_cards/`, the folder of the card templates, beside the hf_specdec package folder (module docstring)."""
    path = Path(__file__).resolve().parents[2] / TEMPLATES
    if not (path / TEMPLATE).is_file():
        raise FileNotFoundError(
            f"model card templates not found: no {TEMPLATES}/{TEMPLATE} beside the hf_specdec package ({path}). "
            "Reinstall hf_specdec (its wheel ships hub_cards/ as package data) or install it from a source checkout."
        )
    return path


def template_path(config: dict | None = None) -> Path:
    """The card template of a saved drafter's config (default: the one every card extends)."""
    return templates_dir() / (kind_template(config)[0] if config is not None else TEMPLATE)


def environment() -> jinja2.Environment:
    """The Jinja environment cards render in: templates from hub_cards/; block tags leave no blank lines."""
    loader = jinja2.FileSystemLoader(str(templates_dir()))
    return jinja2.Environment(loader=loader, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def target_shape(config: dict) -> str:
    """The target a config records, in the terms `generate()` compares: layers, hidden size, vocabulary."""
    parts = [
        f"{config['target_num_hidden_layers']} layers" if config.get("target_num_hidden_layers") else None,
        f"hidden size {config['target_hidden_size']}" if config.get("target_hidden_size") else None,
        f"vocabulary {config['target_vocab_size']}" if config.get("target_vocab_size") else None,
    ]
    shape = ", ".join(p for p in parts if p) or "its shape not recorded; its tapped layers and mask token id"
    return f"{config['target_model_type']}: {shape}" if config.get("target_model_type") else shape


def kind_facts(folder: Path, config: dict) -> dict:
    """What the card states of the drafter saved in `folder` (module docstring)."""
    kind = kind_for_model_type(base_model_type(config))
    own_lm_head = bool(kind and kind.capabilities.own_embeddings)
    head = head_name(config)
    head = head if head in {h.name for h in registered_heads()} else None  # a head no code registered: not stated
    adapter = (folder / "adapter_model.safetensors").is_file() and not (folder / "model.safetensors").is_file()
    backbone = config.get("backbone")
    taps = bool(config.get("target_layer_ids"))  # a drafter with its own LM head reads them only with injection
    return {
        "own_lm_head": own_lm_head,
        "reads_target": taps and (not own_lm_head or bool(config.get("feature_injection"))),
        "target_shape": target_shape(config),
        "adapter": adapter,
        "base_model": config.get("base_model"),
        "base_model_is_hub": is_hub_id(config.get("base_model")),
        "head": head,
        "head_summary": head_named(head).card.summary if head else None,
        "head_only": bool(backbone),
        "backbone": backbone,
        "backbone_is_hub": is_hub_id(backbone),
    }


def resolve_license(license: str | None, config: dict) -> tuple[str, str]:
    """(license id, where it came from): the one given, else the config's `license` field, else hf_specdec's."""
    if license:
        return license, ""
    if config.get("license"):
        return str(config["license"]), "as config.json states"
    return DEFAULT_LICENSE, "the license hf_specdec declares; none was given for this drafter"


__all__ = [
    "DEFAULT_LICENSE",
    "KIND_TEMPLATES",
    "TEMPLATE",
    "environment",
    "head_name",
    "is_hub_id",
    "kind_card",
    "kind_facts",
    "kind_template",
    "resolve_license",
    "template_path",
    "templates_dir",
]
