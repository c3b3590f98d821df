"""Drafting with a PARD drafter and a DCOCO corrector: PARD's pass (one per step, rows of a batch together), then
DCOCO's corrector and walk (chains, best-first trees over the walk's conditional scores, exact-q sampled walks)."""

from __future__ import annotations

from ..dcoco.generation_dcoco import DCOCOCandidateGenerator
from ..pard.generation_pard import PardCandidateGenerator


class PardDCOCOCandidateGenerator(DCOCOCandidateGenerator, PardCandidateGenerator):
    """DCOCO's proposals (`propose`, `greedy_tree`, `sampled_tree`) over PARD's drafter pass and cache."""


__all__ = ["PardDCOCOCandidateGenerator"]
