"""The block drafter base (DFlash architecture): config, model, candidate generator, DFlash checkpoint format.

See docs/block_drafter.md. This is the one place the base is registered.
"""

from ..policy import BlockPolicy
from ..registry import Capabilities, KindCard, register_base
from .configuration_block_drafter import BlockDrafterConfig, build_target_layer_ids
from .generation_block_drafter import BlockDraftCandidateGenerator
from .modeling_block_drafter import BlockDrafter, DraftContextCache

KIND = register_base(
    BlockDrafter,
    BlockDraftCandidateGenerator,
    config_class=BlockDrafterConfig,
    policy_class=BlockPolicy,
    card=KindCard("A parallel block drafter (DFlash architecture)"),
    capabilities=Capabilities(),  # small, reads the target's embeddings and LM head: saved whole
)

__all__ = [
    "BlockDraftCandidateGenerator",
    "BlockDrafter",
    "BlockDrafterConfig",
    "BlockPolicy",
    "DraftContextCache",
    "build_target_layer_ids",
]
