"""Configuration of a PARD drafter with a DBLAST mixture head: `PardConfig` plus the head's shape."""

from __future__ import annotations

from huggingface_hub.dataclasses import strict

from ..dblast.configuration_dblast import check_mixture_shape
from ..pard.configuration_pard import PardConfig


@strict
class PardDBLASTConfig(PardConfig):
    r"""A `PardConfig` with the mixture head's shape (see `DBLASTConfig`).

    Args:
        mixture_components: R, latent components (each a product distribution over the block's positions).
        mixture_rank: r, rank of each component's offset to the logits.
        (all other fields: see `PardConfig`)
    """

    model_type = "hf_specdec_pard_dblast"

    mixture_components: int = 8
    mixture_rank: int = 64

    def validate_drafter(self) -> None:
        super().validate_drafter()
        check_mixture_shape(self)


__all__ = ["PardDBLASTConfig"]
