"""Which of a `generate()` call's stopping criteria a drafted step must honour itself."""

from __future__ import annotations

from transformers import StoppingCriteriaList
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria


def extra_stopping_criteria(stopping_criteria: StoppingCriteriaList | None) -> StoppingCriteriaList | None:
    """The criteria other than max_length and EOS (which the loops cut at themselves), or None when there are none:
    a draft may not run past a token on which one of them ends generation."""
    extra = [c for c in stopping_criteria or () if not isinstance(c, (MaxLengthCriteria, EosTokenCriteria))]
    return StoppingCriteriaList(extra) if extra else None


__all__ = ["extra_stopping_criteria"]
