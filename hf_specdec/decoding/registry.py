"""Which candidate generator serves which drafter kind.

A drafter kind is a `PreTrainedModel` subclass; its generator is a transformers `CandidateGenerator` built as
`generator_cls(drafter, target, generation_config, logits_processor)`. Lookup follows the class hierarchy, so a
subclass of a registered drafter uses its parent's generator unless it registers its own.
"""

from __future__ import annotations

from torch import nn
from transformers.generation.candidate_generator import CandidateGenerator

_GENERATORS: dict[type, type[CandidateGenerator]] = {}


def register_drafter_kind(drafter_cls: type[nn.Module], generator_cls: type[CandidateGenerator]) -> None:
    """Make `target.generate(assistant_model=<drafter_cls instance>)` draft with `generator_cls`."""
    if not issubclass(generator_cls, CandidateGenerator):
        raise TypeError(f"{generator_cls.__name__} must subclass transformers' CandidateGenerator")
    _GENERATORS[drafter_cls] = generator_cls


def generator_class_for(model: object) -> type[CandidateGenerator] | None:
    """The generator registered for `model`'s class or its nearest registered base; None for other models."""
    for cls in type(model).__mro__:
        if cls in _GENERATORS:
            return _GENERATORS[cls]
    return None


__all__ = ["generator_class_for", "register_drafter_kind"]
