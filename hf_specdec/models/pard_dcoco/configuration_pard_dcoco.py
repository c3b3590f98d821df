"""Configuration of a PARD drafter with a DCOCO corrector: `PardConfig` plus the corrector's shape."""

from __future__ import annotations

from huggingface_hub.dataclasses import strict

from ..dcoco.configuration_dcoco import check_corrector_shape
from ..pard.configuration_pard import PardConfig


@strict
class PardDCOCOConfig(PardConfig):
    r"""A `PardConfig` with the corrector's shape (the defaults are DCOCO's published ones, see `DCOCOConfig`).

    Args:
        corrector_candidates: K, candidates kept per drafted slot (top-K of the drafter's scores).
        candidate_width: width of a candidate's representation (token embedding + slot state).
        pair_width: width of the state of two adjacent slots.
        scorer_hidden: hidden width of the 2-layer MLP that scores a transition.
        (all other fields: see `PardConfig`)
    """

    model_type = "hf_specdec_pard_dcoco"

    corrector_candidates: int = 16
    candidate_width: int = 128
    pair_width: int = 128
    scorer_hidden: int = 256

    def validate_drafter(self) -> None:
        super().validate_drafter()
        check_corrector_shape(self)


__all__ = ["PardDCOCOConfig"]
