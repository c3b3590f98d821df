"""Drafting with a PARD drafter and a DBLAST mixture head: PARD's pass (one per step, rows of a batch together),
then DBLAST's mixture (greedy: the likeliest component's block or a tree over it; sampling: a dependent block with
its exact conditionals)."""

from __future__ import annotations

from ..dblast.generation_dblast import DBLASTCandidateGenerator
from ..pard.generation_pard import PardCandidateGenerator


class PardDBLASTCandidateGenerator(DBLASTCandidateGenerator, PardCandidateGenerator):
    """DBLAST's proposals (`propose`, `greedy_tree`, `sampled_tree`) over PARD's drafter pass and cache."""


__all__ = ["PardDBLASTCandidateGenerator"]
