"""The DCOCO head's shape.

DCOCO ("Contextual Correction of Parallel Drafts for Speculative Decoding", Gonen et al.; TD-Labs model cards)
keeps the top-K candidates of every drafted slot and scores how well each candidate fits each candidate of the
next slot. The published corrector: K = 16, candidate width 128, pair-state width 128, a 2-layer scoring MLP
with hidden 256, 512 * d + 132,353 parameters for drafter hidden size d. These are the defaults here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DCOCOHeadConfig:
    """corrector_candidates: K, candidates kept per drafted slot (top-K of the drafter's scores);
    candidate_width: width of a candidate's representation (token embedding + slot state);
    pair_width: width of the state of two adjacent slots;
    scorer_hidden: hidden width of the 2-layer MLP that scores a transition."""

    corrector_candidates: int = 16
    candidate_width: int = 128
    pair_width: int = 128
    scorer_hidden: int = 256

    def check(self, base_config) -> None:
        """Range checks, against the base's draft vocabulary (`draft_vocab_size`)."""
        for name in ("corrector_candidates", "candidate_width", "pair_width", "scorer_hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        vocab = getattr(base_config, "draft_vocab_size", None)
        if vocab is not None and self.corrector_candidates > vocab:
            raise ValueError(
                f"corrector_candidates ({self.corrector_candidates}) exceeds the draft vocabulary ({vocab}); lower it."
            )


__all__ = ["DCOCOHeadConfig"]
