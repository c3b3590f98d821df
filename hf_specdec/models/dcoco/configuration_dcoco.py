"""Configuration of a DCOCO drafter: a block drafter plus a contextual corrector.

DCOCO ("Contextual Correction of Parallel Drafts for Speculative Decoding", Gonen et al.; TD-Labs model cards)
keeps the top-K candidates of every drafted slot and scores how well each candidate fits each candidate of the
next slot. The published corrector: K = 16, candidate width 128, pair-state width 128, a 2-layer scoring MLP
with hidden 256, 512 * d + 132,353 parameters for drafter hidden size d. These are the defaults here.
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict

from ..block_drafter.configuration_block_drafter import BlockDrafterConfig


@strict
class DCOCOConfig(BlockDrafterConfig):
    r"""A `BlockDrafterConfig` with the corrector's shape.

    Args:
        corrector_candidates: K, candidates kept per drafted slot (top-K of the drafter's scores).
        candidate_width: width of a candidate's representation (token embedding + slot hidden state).
        pair_width: width of the state of two adjacent slots.
        scorer_hidden: hidden width of the 2-layer MLP that scores a transition.
        (all other fields: see `BlockDrafterConfig`)
    """

    model_type = "hf_specdec_dcoco"

    corrector_candidates: int = 16
    candidate_width: int = 128
    pair_width: int = 128
    scorer_hidden: int = 256

    def validate_drafter(self) -> None:
        super().validate_drafter()
        check_corrector_shape(self)


def check_corrector_shape(config) -> None:
    """Range checks of a corrector's shape (any config with the four fields above and `draft_vocab_size`)."""
    for name in ("corrector_candidates", "candidate_width", "pair_width", "scorer_hidden"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(config, name)}")
    if config.draft_vocab_size is not None and config.corrector_candidates > config.draft_vocab_size:
        raise ValueError(
            f"corrector_candidates ({config.corrector_candidates}) exceeds the draft vocabulary "
            f"({config.draft_vocab_size}); lower it."
        )


__all__ = ["DCOCOConfig", "check_corrector_shape"]
