"""A PARD drafter with a DBLAST mixture head: config, model, candidate generator.

See docs/pard.md section 6 (heads on a PARD drafter). This is the one place the kind is registered.
"""

from ..dblast.policy import DBLASTPolicy
from ..registry import KindCard, register_drafter_kind
from .configuration_pard_dblast import PardDBLASTConfig
from .generation_pard_dblast import PardDBLASTCandidateGenerator
from .modeling_pard_dblast import PardDBLASTDrafter

KIND = register_drafter_kind(
    PardDBLASTDrafter,
    PardDBLASTCandidateGenerator,
    config_class=PardDBLASTConfig,
    policy_class=DBLASTPolicy,  # the head's own q, not the PARD drafter's it sits on
    card=KindCard(
        "A PARD drafter (a same-family causal LM drafting a block in one forward) with a DBLAST mixture head",
        detail="Its mixture head ties the drafted positions together through a latent component, so sampled blocks "
        "are dependent; acceptance uses their exact conditionals.",
        tags=("pard", "dblast"),
    ),
)

__all__ = ["PardDBLASTCandidateGenerator", "PardDBLASTConfig", "PardDBLASTDrafter"]
