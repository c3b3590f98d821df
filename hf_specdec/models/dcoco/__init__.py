"""DCOCO: a block drafter with a contextual corrector that re-ranks each slot's top candidates by how well they
fit their neighbours, then walks prefix-first. Config, model, walk, candidate generator, policy.

See docs/dcoco.md. This is the one place the kind is registered.
"""

from ..registry import KindCard, register_drafter_kind
from .configuration_dcoco import DCOCOConfig
from .generation_dcoco import DCOCOCandidateGenerator
from .modeling_dcoco import DCOCODrafter
from .policy import DCOCOPolicy

KIND = register_drafter_kind(
    DCOCODrafter,
    DCOCOCandidateGenerator,
    config_class=DCOCOConfig,
    policy_class=DCOCOPolicy,
    card=KindCard(
        "A DCOCO drafter (a DFlash-style block drafter with a contextual corrector)",
        "Its corrector re-ranks the top candidates of each drafted slot by how well they fit the neighbouring slots.",
        ("dcoco",),
    ),
)

__all__ = ["DCOCOCandidateGenerator", "DCOCOConfig", "DCOCODrafter", "DCOCOPolicy"]
