"""The DCOCO head: a contextual corrector that re-ranks each drafted slot's top candidates by how well they fit
their neighbours, then walks prefix-first. Config, module, walk, proposals, policy; attach it to any base with
`attach_head(drafter, "dcoco", ...)`.

See docs/dcoco.md. This is the one place the head is registered.
"""

from ...registry import DrafterHead, KindCard, register_head
from .config import DCOCOHeadConfig
from .module import ContextualCorrector, CorrectorScores
from .policy import DCOCOPolicy
from .proposals import DCOCOProposals

HEAD = register_head(
    DrafterHead(
        name="dcoco",
        config_class=DCOCOHeadConfig,
        module_class=ContextualCorrector,
        proposals_class=DCOCOProposals,
        policy_class=DCOCOPolicy,
        card=KindCard(
            "Its DCOCO corrector re-ranks the top candidates of each drafted slot by how well they fit the "
            "neighbouring slots.",
            tags=("dcoco",),
        ),
        attr="corrector",
    )
)

__all__ = ["ContextualCorrector", "CorrectorScores", "DCOCOHeadConfig", "DCOCOPolicy", "DCOCOProposals"]
