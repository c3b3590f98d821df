"""The compared methods: plain greedy `generate`, HF assisted generation, HF prompt lookup, hf_specdec drafters,
and transformers' own DFlash path with a block drafter's weights (`native_dflash`).

Each is a way to call `target.generate` on the same target (extra kwargs), built from the loaded `Models` and the
run's `Settings`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from .native_dflash import SPECULATION_TYPE, native_dflash_assistant, native_dflash_refusal

logger = logging.getLogger(__name__)

PLAIN = "plain"
NATIVE_DFLASH = "native-dflash"


@dataclass
class Settings:
    """What every timed call shares. temperature 0 = greedy; > 0 = sampling at that temperature with top-p `top_p`
    (top-k off)."""

    dtype: str = "bfloat16"
    device: str = "cpu"
    max_new_tokens: int = 128
    repeats: int = 1
    warmup: int = 1
    assistant_tokens: int = 7
    prompt_lookup: int = 10
    identity_dtype: str | None = "float32"
    temperature: float = 0.0
    top_p: float = 1.0
    identity_new_tokens: int | None = None  # new tokens per identity call (default: max_new_tokens)
    identity_all_methods: bool = False  # also check the peers (transformers' own methods), not only hf_specdec
    # drafter labels also run through transformers' DFlash path; () = every block drafter that can; None = none
    native_dflash: tuple[str, ...] | None = None

    @property
    def do_sample(self) -> bool:
        return self.temperature > 0

    def generation_kwargs(self) -> dict:
        if not self.do_sample:
            return {"do_sample": False}
        return {"do_sample": True, "temperature": self.temperature, "top_k": 0, "top_p": self.top_p}


@dataclass
class Models:
    """Everything one pass needs, in one dtype: the target, the optional assistant, the drafters by label."""

    target: torch.nn.Module
    assistant: torch.nn.Module | None = None
    drafters: dict[str, torch.nn.Module] = field(default_factory=dict)


@dataclass
class Method:
    """A way to call `target.generate`: extra kwargs, and the drafter whose stats to read (hf_specdec only)."""

    label: str
    kind: str  # plain | assisted | prompt_lookup | hf_specdec | native_dflash
    gen_kwargs: dict = field(default_factory=dict)
    drafter: torch.nn.Module | None = None
    extra_module: torch.nn.Module | None = None  # weights on top of the target's (assistant or drafter)
    settings: dict = field(default_factory=dict)  # for the report

    def describe(self) -> dict:
        return {
            "label": self.label,
            "kind": self.kind,
            "settings": self.settings,
            "extra_weights_mib": self.extra_mib(),
        }

    def extra_mib(self) -> float:
        if self.extra_module is None:
            return 0.0
        return sum(p.numel() * p.element_size() for p in self.extra_module.parameters()) / 2**20


def configure_assistant(assistant, num_tokens: int) -> dict:
    """Fixed draft length and no confidence early-stop, so each call drafts `num_tokens` and keeps no state; with
    `num_tokens` 0, transformers' defaults (20 tokens, constant schedule, confidence threshold 0.4, tuned as it runs).

    transformers reads these from the assistant's generation config (not from `generate` kwargs); the default
    "heuristic" schedule and the ROC-tuned threshold would carry state from one call to the next.
    """
    if num_tokens <= 0:
        return {"transformers_defaults": True}
    knobs = {
        "num_assistant_tokens": num_tokens,
        "num_assistant_tokens_schedule": "constant",
        "assistant_confidence_threshold": 0.0,
    }
    for name, value in knobs.items():
        setattr(assistant.generation_config, name, value)
    return knobs


def build_methods(models: Models, settings: Settings) -> list[Method]:
    """Plain first (the reference), then the assistant, prompt lookup and each drafter, when present."""
    methods = [Method(PLAIN, "plain")]
    if models.assistant is not None:
        knobs = configure_assistant(models.assistant, settings.assistant_tokens)
        kwargs = {"assistant_model": models.assistant}
        methods.append(Method("hf-assisted", "assisted", kwargs, extra_module=models.assistant, settings=knobs))
    if settings.prompt_lookup > 0:
        kwargs = {"prompt_lookup_num_tokens": settings.prompt_lookup}
        methods.append(Method("prompt-lookup", "prompt_lookup", kwargs, settings=kwargs))
    for label, drafter in models.drafters.items():
        knobs = {
            "block_size": drafter.config.block_size,
            "target_layer_ids": list(drafter.config.target_layer_ids),
            "decoding": drafter.decoding.to_dict(),
        }
        methods.append(Method(label, "hf_specdec", {"assistant_model": drafter}, drafter, drafter, knobs))
    return methods + native_dflash_methods(models, settings.native_dflash)


def native_dflash_methods(models: Models, labels: tuple[str, ...] | None) -> list[Method]:
    """transformers' DFlash path with the weights of the drafters `labels` (() = every one that can run there).

    A drafter named in `labels` that cannot run there is a ValueError that says why; with () such drafters are
    skipped with a warning that says why."""
    if labels is None:
        return []
    unknown = sorted(set(labels) - set(models.drafters))
    if unknown:
        raise ValueError(f"--native-dflash names {unknown}, not drafters of this run ({sorted(models.drafters)})")
    chosen = {}
    for label in labels or list(models.drafters):
        reason = native_dflash_refusal(models.drafters[label])
        if reason is None:
            chosen[label] = models.drafters[label]
        elif labels:
            raise ValueError(f"drafter {label!r} cannot run through transformers' DFlash path: {reason}")
        else:
            logger.warning("drafter %r skipped for %s: %s", label, NATIVE_DFLASH, reason)
    methods = []
    for label, drafter in chosen.items():
        assistant = native_dflash_assistant(drafter, models.target)
        kwargs = {"assistant_model": assistant, "speculation_type": SPECULATION_TYPE}
        knobs = {"weights_of": label, "block_size": drafter.config.block_size, "speculation_type": SPECULATION_TYPE}
        name = NATIVE_DFLASH if len(chosen) == 1 else f"{NATIVE_DFLASH}:{label}"
        methods.append(Method(name, "native_dflash", kwargs, extra_module=assistant, settings=knobs))
    return methods
