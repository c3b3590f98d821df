"""The one table of drafter bases and heads: everything the rest of hf_specdec needs to know about them.

A drafter is a **base** with an optional **head** (docs/heads.md).

A base is a `PreTrainedModel` subclass together with
- its config class (a `PretrainedConfig` with its own `model_type`, saved with the weights; it carries the fields
  `head` (the attached head's type and shape, or None) and `backbone` (set only in a folder that holds a head alone)),
- its candidate generator (a transformers `CandidateGenerator`: how it drafts inside `generate()`); the generator is
  the seam a head reads: `block_states(input_ids, k)` gives (k + 1, H) states of the anchor and the drafted slots and
  (k, Vd) their scores, `embed` the token embeddings in the drafter's width, `draft_vocab` the scored ids,
- its policy (how on-policy distillation draws branches and reads q along one, docs/specopd.md section 4),
- its model card text,
- its capabilities (`Capabilities`): what it can do beyond drafting, declared here instead of probed.

A head is a small module that reads a base's block states and proposes from them: its config (a typed dataclass of
its shape), its module, its proposals (argmax chain, greedy tree, exact-q sampled tree), its policy, its card, and
the attribute it lives under in the drafter (its weights' prefix). `models/attach.py` puts any head on any base.

A published format is a checkpoint layout another project writes (z-lab's DFlash, ...): `models/formats/` holds a
reader and a writer per format, each mapping onto a base (and head); `register_format` lets the base read it.

Each base folder and each head folder makes ONE call, `register_base(...)` or `register_head(...)`, in its
`__init__.py`. Every consumer reads this table: transformers' `AutoConfig` / `AutoModel` (registered by the call
itself), `load_drafter`, the transformers seam and hf_specdec's decoding loop (`generator_class_for`), SpecOPD
(`policy_class_for`) and model cards (`card_for`).

Lookups by class follow the class hierarchy: a subclass of a registered base that does not register itself is
served as its parent; one that registers with its parent's config class (same `model_type`, same saved format)
gets its own generator and policy but leaves the Auto classes and `load_drafter` to the parent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel
from transformers.generation.candidate_generator import CandidateGenerator


@dataclass(frozen=True)
class KindCard:
    """What a model card says about a base or a head: a one-line summary, how it differs, extra Hub tags."""

    summary: str
    detail: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Capabilities:
    """What a base can do besides drafting one row.

    draft_rows: its generator class drafts several rows of a batch in one pass (`draft_rows(generators, ids)`).
    adapter_folders: it saves and loads a LoRA adapter folder over its base LM (`save_adapter_folder`,
        `from_adapter_folder`, `is_adapter_folder`).
    head_only_saving: a head trained on it is also saved alone over the base's folder (its base is too large to
        copy with every head); every base can load such a folder.
    trainable_token_rows: LoRA trains some embedding rows besides the adapters (`trainable_token_indices`).
    own_embeddings: it embeds and scores with its own token embeddings and LM head (a causal LM), not the target's.
    """

    draft_rows: bool = False
    adapter_folders: bool = False
    head_only_saving: bool = False
    trainable_token_rows: bool = False
    own_embeddings: bool = False


@dataclass(frozen=True)
class DrafterKind:
    """One base (see the module docstring)."""

    model_class: type[PreTrainedModel]
    config_class: type[PretrainedConfig]
    generator_class: type[CandidateGenerator]
    policy_class: type | None
    card: KindCard
    capabilities: Capabilities = Capabilities()

    @property
    def model_type(self) -> str:
        return self.config_class.model_type


DrafterBase = DrafterKind


class HeadModule(nn.Module):
    """What every head module is: built from (its head config, the base's config) and initialised by itself, so a
    fresh head leaves the base's drafts as they were (or changes them as its method says) on any base."""

    def __init__(self, head_config, base_config: PretrainedConfig) -> None:
        super().__init__()

    def init_weights(self) -> None:
        """Set this head's fresh-weight values (called after the base's own initialisation)."""


@dataclass(frozen=True)
class DrafterHead:
    """One head (see the module docstring)."""

    name: str
    config_class: type  # a dataclass of the head's shape, with `check(base_config)` for range checks
    module_class: type[HeadModule]
    proposals_class: type  # (module, generator) -> chain / greedy_tree / sampled_tree
    policy_class: type
    card: KindCard
    attr: str  # the attribute of the drafter the module lives under (the prefix of its weights)

    def shape(self, head: dict) -> object:
        """The head's config from a drafter config's `head` dict (its "type" entry left out); TypeError on a field
        the head does not have."""
        fields = {k: v for k, v in head.items() if k != "type"}
        known = {f.name for f in dataclasses.fields(self.config_class)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise TypeError(f"the {self.name} head has no setting {unknown}; its settings: {sorted(known)}")
        return self.config_class(**fields)


@dataclass(frozen=True)
class PublishedFormat:
    """A checkpoint layout another project publishes, read natively by a base (`models/formats/`, one module each).

    recognises: whether a `config.json` (as a dict) is in this layout;
    to_config: that dict as the base's config;
    after_load: (model, path, hub kwargs) -> (whether it restored the draft vocabulary, the layout's tensors it read
        itself): what the layout keeps its own way, put in place after the weights loaded;
    key_mapping: the layout's tensor names (regular expressions) -> the base's, for a layout that names the same
        tensors otherwise (transformers' `from_pretrained(key_mapping=...)`); None when the names are the base's.
    """

    name: str
    base_model_type: str
    recognises: Callable[[dict], bool]
    to_config: Callable[[dict], PretrainedConfig]
    after_load: Callable[[PreTrainedModel, object, dict], tuple[bool, set[str]]]
    key_mapping: dict[str, str] | None = None


_BY_CLASS: dict[type, DrafterKind] = {}
_BY_MODEL_TYPE: dict[str, DrafterKind] = {}
_HEADS: dict[str, DrafterHead] = {}
_FORMATS: dict[str, PublishedFormat] = {}


def register_base(
    model_class: type[PreTrainedModel],
    generator_class: type[CandidateGenerator],
    *,
    config_class: type[PretrainedConfig] | None = None,
    policy_class: type | None = None,
    card: KindCard | None = None,
    capabilities: Capabilities | None = None,
) -> DrafterKind:
    """Register a drafter base: after this, `AutoModel.from_pretrained`, `load_drafter`,
    `target.generate(assistant_model=<model_class instance>)`, batches, the server, SpecOPD, model cards and every
    registered head know it. `config_class` defaults to `model_class.config_class`; `policy_class`, `card` and
    `capabilities` default to those of the nearest registered base class."""
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
        capabilities=capabilities or (parent.capabilities if parent else Capabilities()),
    )
    _BY_CLASS[model_class] = kind
    owner = _BY_MODEL_TYPE.get(config_class.model_type)
    if owner is None or owner.model_class is model_class or not issubclass(model_class, owner.model_class):
        _BY_MODEL_TYPE[config_class.model_type] = kind
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        AutoModel.register(config_class, model_class, exist_ok=True)
    return kind


register_drafter_kind = register_base  # the name the README and earlier releases use


def register_head(head: DrafterHead) -> DrafterHead:
    """Register a head: after this `attach_head(drafter, head.name, ...)` puts it on any registered base, and a saved
    drafter whose config names it loads with it."""
    if not issubclass(head.module_class, HeadModule):
        raise TypeError(f"{head.module_class.__name__} must subclass hf_specdec's HeadModule")
    if not dataclasses.is_dataclass(head.config_class):
        raise TypeError(f"{head.config_class.__name__} must be a dataclass (the head's typed shape)")
    _HEADS[head.name] = head
    return head


def register_format(published: PublishedFormat) -> PublishedFormat:
    """Register a published layout: the base it names then reads such checkpoints in `from_pretrained`."""
    _FORMATS[published.name] = published
    return published


def published_format(config: dict | None, base_model_type: str | None = None) -> PublishedFormat | None:
    """The registered layout a `config.json` dict is in, among those the base saving `base_model_type` reads (any
    base's: None); None for a base's own format or another model."""
    if not isinstance(config, dict):
        return None
    readers = [f for f in _FORMATS.values() if base_model_type in (None, f.base_model_type)]
    return next((f for f in readers if f.recognises(config)), None)


def kind_of(model: object) -> DrafterKind | None:
    """The base registered for `model` (an instance or a class) or its nearest registered base; None otherwise."""
    cls = model if isinstance(model, type) else type(model)
    return next((_BY_CLASS[c] for c in cls.__mro__ if c in _BY_CLASS), None)


def kind_for_model_type(model_type: str | None) -> DrafterKind | None:
    """The base that saves checkpoints with this `model_type` (None for any other)."""
    return _BY_MODEL_TYPE.get(model_type)


def kind_for_config(config: object) -> DrafterKind | None:
    """The base whose config class `config` is (or derives from: a saved format's alias); None for any other."""
    kind = kind_for_model_type(getattr(config, "model_type", None))
    if kind is not None:
        return kind
    owners = [k for k in _BY_MODEL_TYPE.values() if isinstance(config, k.config_class)]
    return max(owners, key=lambda k: len(k.config_class.__mro__), default=None)


def head_proposals(drafter: PreTrainedModel, generator: CandidateGenerator) -> object | None:
    """The proposals of the head `drafter` carries, reading `generator` (its base's); None for a bare base."""
    spec = head_of(drafter)
    return None if spec is None else spec.proposals_class(getattr(drafter, spec.attr), generator)


def head_named(name: str) -> DrafterHead:
    """The registered head called `name`; ValueError naming the registered ones otherwise."""
    if name not in _HEADS:
        raise ValueError(f"no drafter head named {name!r}; registered heads: {sorted(_HEADS)}")
    return _HEADS[name]


def head_of(model: object) -> DrafterHead | None:
    """The head `model` (a drafter instance, or its config) carries; None for a bare base or a non-drafter."""
    config = getattr(model, "config", model)
    head = getattr(config, "head", None)
    return head_named(head["type"]) if isinstance(head, dict) else None


def capabilities_of(model: object) -> Capabilities:
    """What `model`'s base declares it can do (nothing, for a model that is not a registered drafter)."""
    kind = kind_of(model)
    return Capabilities() if kind is None else kind.capabilities


def generator_class_for(model: object) -> type[CandidateGenerator] | None:
    """The candidate generator of `model`'s base (a head is read by it); None for a model that is not a drafter."""
    kind = kind_of(model)
    return None if kind is None else kind.generator_class


def policy_class_for(model: object) -> type | None:
    """The on-policy strategy of `model`: its head's when it carries one (the head's q), else its base's."""
    head = head_of(model)
    if head is not None:
        return head.policy_class
    kind = kind_of(model)
    return None if kind is None else kind.policy_class


def card_for(model_type: str | None, head: dict | None = None) -> tuple[str, KindCard] | None:
    """(the base's class name, the card text: the base's and its head's) for a saved `model_type` and `head`; None
    for a type no base saves."""
    kind = kind_for_model_type(model_type)
    if kind is None:
        return None
    name = kind.model_class.__name__
    if not isinstance(head, dict) or head.get("type") not in _HEADS:
        return name, kind.card
    spec = _HEADS[head["type"]]
    card = KindCard(
        f"{kind.card.summary}, with a {spec.name.upper()} head",
        " ".join(text for text in (kind.card.detail, spec.card.summary, spec.card.detail) if text),
        (*kind.card.tags, *spec.card.tags),
    )
    return name, card


def build_head(drafter: PreTrainedModel) -> HeadModule | None:
    """The module of the head `drafter.config.head` names, put under its attribute (None for a bare base). Bases
    call it at the end of `__init__`."""
    spec = head_of(drafter)
    if spec is None:
        return None
    module = spec.module_class(spec.shape(drafter.config.head), drafter.config)
    module.init_weights()
    setattr(drafter, spec.attr, module)
    return module


def check_head(config: PretrainedConfig) -> None:
    """Range checks of a config's `head` (the base configs call it in their validation)."""
    head = getattr(config, "head", None)
    if head is None:
        return
    if not isinstance(head, dict) or "type" not in head:
        raise ValueError(f"a drafter config's head must be a dict with its 'type', got {head!r}")
    spec = head_named(head["type"])
    spec.shape(head).check(config)


def registered_kinds() -> list[DrafterKind]:
    """Every base with its own saved format, in registration order."""
    return list(_BY_MODEL_TYPE.values())


def registered_heads() -> list[DrafterHead]:
    """Every head, in registration order."""
    return list(_HEADS.values())


def registered_formats() -> list[PublishedFormat]:
    """Every published layout a base reads, in registration order."""
    return list(_FORMATS.values())


__all__ = [
    "Capabilities",
    "DrafterBase",
    "DrafterHead",
    "DrafterKind",
    "HeadModule",
    "KindCard",
    "PublishedFormat",
    "build_head",
    "capabilities_of",
    "card_for",
    "check_head",
    "generator_class_for",
    "head_named",
    "head_proposals",
    "head_of",
    "kind_for_config",
    "kind_for_model_type",
    "kind_of",
    "policy_class_for",
    "published_format",
    "register_base",
    "register_drafter_kind",
    "register_format",
    "register_head",
    "registered_formats",
    "registered_heads",
    "registered_kinds",
]
