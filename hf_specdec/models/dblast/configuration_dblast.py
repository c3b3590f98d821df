"""Configuration of a DBLAST drafter: a block drafter with a low-rank latent mixture head.

DBLAST ("Dependent Block Drafting for Stochastic Speculative Decoding", Karimi, Gao, Hassanpour) ties the
positions of a drafted block together through a latent component, so a block sampled at temperature follows one
mode instead of mixing modes position by position. The design (docs/dblast.md section 2) is a rank-R mixture of
product distributions with low-rank per-component offsets to the drafter's logits.
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict

from ..block_drafter.configuration_block_drafter import BlockDrafterConfig


@strict
class DBLASTConfig(BlockDrafterConfig):
    r"""A `BlockDrafterConfig` with the mixture head's shape.

    Args:
        mixture_components: R, latent components (each a product distribution over the block's positions).
        mixture_rank: r, rank of each component's offset to the logits: Delta[k, z] = ((A h_k) * c_z) B^T.
        (all other fields: see `BlockDrafterConfig`)
    """

    model_type = "hf_specdec_dblast"

    mixture_components: int = 8
    mixture_rank: int = 64

    def validate_drafter(self) -> None:
        super().validate_drafter()
        check_mixture_shape(self)


def check_mixture_shape(config) -> None:
    """Range checks of a mixture head's shape (any config with `mixture_components` and `mixture_rank`)."""
    if config.mixture_components < 1 or config.mixture_rank < 1:
        raise ValueError(
            f"mixture_components and mixture_rank must be >= 1, got {config.mixture_components} and "
            f"{config.mixture_rank}"
        )


__all__ = ["DBLASTConfig", "check_mixture_shape"]
