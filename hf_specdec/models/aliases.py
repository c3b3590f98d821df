"""The names a base with a head went by when each pair was a class of its own: `DCOCODrafter` (a block drafter with
a DCOCO head), `DBLASTDrafter`, `PardDCOCODrafter`, `PardDBLASTDrafter`, and their config classes (which read the
configs those classes saved). Each is `attach_head` over its base; `isinstance(drafter, DCOCODrafter)` is True for a
block drafter carrying a DCOCO head.
"""

from __future__ import annotations

from transformers import PreTrainedModel

from .attach import attach_head
from .block_drafter import BlockDrafter
from .loading import load_drafter, saved_head_config
from .pard import PardDrafter
from .registry import head_named, head_of


class _HeadAlias(type):
    def __instancecheck__(cls, obj) -> bool:
        spec = head_of(obj)
        return isinstance(obj, cls.base) and spec is not None and spec.name == cls.head


class _BaseWithHead(metaclass=_HeadAlias):
    base: type[PreTrainedModel]
    head: str

    @classmethod
    def over(cls, drafter: PreTrainedModel, **shape) -> PreTrainedModel:
        """`drafter` with a fresh head of `shape` on top (`attach_head`)."""
        return attach_head(drafter, cls.head, **shape)

    from_block_drafter = over  # the names the pair classes built one by
    from_pard = over

    @classmethod
    def for_target(cls, target: PreTrainedModel, **kwargs) -> PreTrainedModel:
        """A fresh base for `target` with a fresh head; kwargs: the base's and the head's config fields."""
        fields = {f for f in head_named(cls.head).config_class.__dataclass_fields__}
        shape = {k: kwargs.pop(k) for k in list(kwargs) if k in fields}
        return attach_head(cls.base.for_target(target, **kwargs), cls.head, **shape)

    @classmethod
    def from_pretrained(cls, name_or_path, **kwargs) -> PreTrainedModel:
        return load_drafter(name_or_path, **kwargs)


class DCOCODrafter(_BaseWithHead):
    """A block drafter with a DCOCO head."""

    base, head = BlockDrafter, "dcoco"


class DBLASTDrafter(_BaseWithHead):
    """A block drafter with a DBLAST head."""

    base, head = BlockDrafter, "dblast"


class PardDCOCODrafter(_BaseWithHead):
    """A PARD drafter with a DCOCO head."""

    base, head = PardDrafter, "dcoco"


class PardDBLASTDrafter(_BaseWithHead):
    """A PARD drafter with a DBLAST head."""

    base, head = PardDrafter, "dblast"


DCOCOConfig = saved_head_config("hf_specdec_dcoco")
DBLASTConfig = saved_head_config("hf_specdec_dblast")
PardDCOCOConfig = saved_head_config("hf_specdec_pard_dcoco")
PardDBLASTConfig = saved_head_config("hf_specdec_pard_dblast")

__all__ = [
    "DBLASTConfig",
    "DBLASTDrafter",
    "DCOCOConfig",
    "DCOCODrafter",
    "PardDBLASTConfig",
    "PardDBLASTDrafter",
    "PardDCOCOConfig",
    "PardDCOCODrafter",
]
