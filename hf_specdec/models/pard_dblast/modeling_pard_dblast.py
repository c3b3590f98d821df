"""A PARD drafter with a DBLAST mixture head: the causal LM drafts the block in one pass and the head ties its
positions together through a latent component, so a sampled block follows one mode (docs/dblast.md section 2).

What the head reads from a PARD pass: the anchor's state (the LM's output at the anchor) picks the component
weights, slot s's state (the output that predicts it, `PardCandidateGenerator.block_states`) its offsets. The
offsets start at zero, so a fresh head drafts exactly as the PARD drafter under it.
"""

from __future__ import annotations

from torch import nn

from ..dblast.modeling_dblast import LatentMixtureHead, MixtureDraft
from ..pard.modeling_pard import PardDrafter
from .configuration_pard_dblast import PardDBLASTConfig


class PardDBLASTDrafter(MixtureDraft, PardDrafter):
    """`PardDrafter` + `LatentMixtureHead`. Build one from a PARD drafter with `from_pard`."""

    config_class = PardDBLASTConfig
    head_modules = ("mixture_head",)

    def __init__(self, config: PardDBLASTConfig, lm=None) -> None:
        super().__init__(config, lm=lm)
        self.mixture_head = LatentMixtureHead(config)
        self.post_init()
        nn.init.normal_(self.mixture_head.codes, std=1.0)
        nn.init.zeros_(self.mixture_head.up.weight)

    @classmethod
    def from_pard(cls, drafter: PardDrafter, **head_kwargs) -> PardDBLASTDrafter:
        """A drafter over `drafter`'s LM (shared) with a fresh head (drafting like `drafter`); `head_kwargs`: its
        shape."""
        return cls.with_backbone(drafter, **head_kwargs)


__all__ = ["PardDBLASTDrafter"]
