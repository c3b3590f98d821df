"""The DBLAST head's shape.

DBLAST ("Dependent Block Drafting for Stochastic Speculative Decoding", Karimi, Gao, Hassanpour) ties the
positions of a drafted block together through a latent component, so a block sampled at temperature follows one
mode instead of mixing modes position by position. The design (docs/dblast.md section 2) is a rank-R mixture of
product distributions with low-rank per-component offsets to the drafter's logits.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DBLASTHeadConfig:
    """mixture_components: R, latent components (each a product distribution over the block's positions);
    mixture_rank: r, rank of each component's offset to the logits: Delta[k, z] = ((A h_k) * c_z) B^T."""

    mixture_components: int = 8
    mixture_rank: int = 64

    def check(self, base_config) -> None:
        if self.mixture_components < 1 or self.mixture_rank < 1:
            raise ValueError(
                f"mixture_components and mixture_rank must be >= 1, got {self.mixture_components} and "
                f"{self.mixture_rank}"
            )


__all__ = ["DBLASTHeadConfig"]
