"""The block drafter (DFlash architecture): config, model, candidate generator, policy, DFlash checkpoint format.

See docs/block_drafter.md. This is the one place the kind is registered.
"""

from ..registry import KindCard, register_drafter_kind
from .configuration_block_drafter import BlockDrafterConfig, build_target_layer_ids
from .generation_block_drafter import BlockDraftCandidateGenerator
from .modeling_block_drafter import BlockDrafter, DraftContextCache
from .policy import BlockPolicy

KIND = register_drafter_kind(
    BlockDrafter,
    BlockDraftCandidateGenerator,
    config_class=BlockDrafterConfig,
    policy_class=BlockPolicy,
    card=KindCard("A parallel block drafter (DFlash architecture)"),
)

__all__ = [
    "BlockDraftCandidateGenerator",
    "BlockDrafter",
    "BlockDrafterConfig",
    "BlockPolicy",
    "DraftContextCache",
    "build_target_layer_ids",
]
