"""A PARD drafter with a DCOCO corrector: the causal LM drafts the block in one pass, the corrector re-ranks each
slot's top candidates by how well they fit the neighbouring slots, and the prefix-first walk picks the draft.

The corrector is DCOCO's (`models/dcoco`, docs/dcoco.md section 2). What it reads from a PARD pass: the anchor's
state is the LM's output at the anchor, slot s's the output that predicts it (`PardCandidateGenerator.block_states`),
and candidate tokens are embedded with the LM's own input embeddings (the drafter's width d).
"""

from __future__ import annotations

from ..dcoco.modeling_dcoco import ContextualCorrector, CorrectedDraft
from ..pard.modeling_pard import PardDrafter
from .configuration_pard_dcoco import PardDCOCOConfig


class PardDCOCODrafter(CorrectedDraft, PardDrafter):
    """`PardDrafter` + `ContextualCorrector`. Build one from a PARD drafter with `from_pard`."""

    config_class = PardDCOCOConfig
    head_modules = ("corrector",)

    def __init__(self, config: PardDCOCOConfig, lm=None) -> None:
        super().__init__(config, lm=lm)
        self.corrector = ContextualCorrector(config)
        self.post_init()

    @classmethod
    def from_pard(cls, drafter: PardDrafter, **corrector_kwargs) -> PardDCOCODrafter:
        """A drafter over `drafter`'s LM (shared) with a fresh corrector; `corrector_kwargs`: its shape."""
        return cls.with_backbone(drafter, **corrector_kwargs)


__all__ = ["PardDCOCODrafter"]
