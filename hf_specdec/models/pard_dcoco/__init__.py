"""A PARD drafter with a DCOCO corrector: config, model, candidate generator.

See docs/pard.md section 6 (heads on a PARD drafter). This is the one place the kind is registered.
"""

from ..dcoco.policy import DCOCOPolicy
from ..registry import KindCard, register_drafter_kind
from .configuration_pard_dcoco import PardDCOCOConfig
from .generation_pard_dcoco import PardDCOCOCandidateGenerator
from .modeling_pard_dcoco import PardDCOCODrafter

KIND = register_drafter_kind(
    PardDCOCODrafter,
    PardDCOCOCandidateGenerator,
    config_class=PardDCOCOConfig,
    policy_class=DCOCOPolicy,  # the head's own q, not the PARD drafter's it sits on
    card=KindCard(
        "A PARD drafter (a same-family causal LM drafting a block in one forward) with a DCOCO corrector",
        detail="Its corrector re-ranks the top candidates of each drafted slot by how well they fit the neighbouring "
        "slots.",
        tags=("pard", "dcoco"),
    ),
)

__all__ = ["PardDCOCOCandidateGenerator", "PardDCOCOConfig", "PardDCOCODrafter"]
