"""The one table of drafter kinds: everything the rest of hf_specdec needs to know about a kind.

A drafter kind is a `PreTrainedModel` subclass together with
- its config class (a `PretrainedConfig` with its own `model_type`, saved with the weights),
- its candidate generator (a transformers `CandidateGenerator`: how it drafts inside `generate()`, chains, trees
  and exact-q samples),
- its policy (how on-policy distillation draws branches from it and reads q along a branch, see
  `docs/specopd.md` section 4),
- the text of its model card.

Each kind's folder (`models/block_drafter/`, `models/dcoco/`, `models/dblast/`) makes ONE call,
`register_drafter_kind(...)`, in its `__init__.py`. Every consumer reads this table:
- transformers' `AutoConfig` / `AutoModel` (registered by the call itself),
- `load_drafter` (by the checkpoint's `model_type`),
- the transformers seam and hf_specdec's decoding loop (`kind_of(drafter).generator_class`),
- SpecOPD (`kind_of(drafter).policy_class`),
- model cards (`kind_for_model_type(model_type).card`).

Lookups by class follow the class hierarchy: a subclass of a registered drafter that does not register itself
is served as its parent; one that registers with its parent's config class (same `model_type`, same saved format)
gets its own generator and policy but leaves the Auto classes and `load_drafter` to the parent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel
from transformers.generation.candidate_generator import CandidateGenerator


@dataclass(frozen=True)
class KindCard:
    """What a model card says about a kind: a one-line summary, how it differs, extra Hub tags."""

    summary: str
    detail: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class DrafterKind:
    """One row of the table (see the module docstring)."""

    model_class: type[PreTrainedModel]
    config_class: type[PretrainedConfig]
    generator_class: type[CandidateGenerator]
    policy_class: type | None
    card: KindCard

    @property
    def model_type(self) -> str:
        return self.config_class.model_type


_BY_CLASS: dict[type, DrafterKind] = {}
_BY_MODEL_TYPE: dict[str, DrafterKind] = {}


def register_drafter_kind(
    model_class: type[PreTrainedModel],
    generator_class: type[CandidateGenerator],
    *,
    config_class: type[PretrainedConfig] | None = None,
    policy_class: type | None = None,
    card: KindCard | None = None,
) -> DrafterKind:
    """Register a drafter kind: after this, `AutoModel.from_pretrained`, `load_drafter`,
    `target.generate(assistant_model=<model_class instance>)`, batches, the server, SpecOPD and model cards all
    know it. `config_class` defaults to `model_class.config_class`; `policy_class` and `card` default to those of the
    nearest registered base class."""
    if not (isinstance(generator_class, type) and issubclass(generator_class, CandidateGenerator)):
        raise TypeError(f"{getattr(generator_class, '__name__', generator_class)} must subclass CandidateGenerator")
    if not (isinstance(model_class, type) and issubclass(model_class, PreTrainedModel)):
        raise TypeError(f"{getattr(model_class, '__name__', model_class)} must subclass transformers' PreTrainedModel")
    config_class = config_class or model_class.config_class
    parent = next((_BY_CLASS[c] for c in model_class.__mro__[1:] if c in _BY_CLASS), None)
    kind = DrafterKind(
        model_class=model_class,
        config_class=config_class,
        generator_class=generator_class,
        policy_class=policy_class or (parent.policy_class if parent else None),
        card=card or (parent.card if parent else KindCard(f"A {model_class.__name__} drafter")),
    )
    _BY_CLASS[model_class] = kind
    owner = _BY_MODEL_TYPE.get(config_class.model_type)
    if owner is None or owner.model_class is model_class or not issubclass(model_class, owner.model_class):
        _BY_MODEL_TYPE[config_class.model_type] = kind
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        AutoModel.register(config_class, model_class, exist_ok=True)
    return kind


def kind_of(model: object) -> DrafterKind | None:
    """The kind registered for `model` (an instance or a class) or its nearest registered base; None otherwise."""
    cls = model if isinstance(model, type) else type(model)
    return next((_BY_CLASS[c] for c in cls.__mro__ if c in _BY_CLASS), None)


def kind_for_model_type(model_type: str | None) -> DrafterKind | None:
    """The kind that saves checkpoints with this `model_type` (None for any other)."""
    return _BY_MODEL_TYPE.get(model_type)


def generator_class_for(model: object) -> type[CandidateGenerator] | None:
    """The candidate generator of `model`'s kind; None for a model that is not an hf_specdec drafter."""
    kind = kind_of(model)
    return None if kind is None else kind.generator_class


def registered_kinds() -> list[DrafterKind]:
    """Every kind with its own saved format, in registration order."""
    return list(_BY_MODEL_TYPE.values())


__all__ = [
    "DrafterKind",
    "KindCard",
    "generator_class_for",
    "kind_for_model_type",
    "kind_of",
    "register_drafter_kind",
    "registered_kinds",
]
