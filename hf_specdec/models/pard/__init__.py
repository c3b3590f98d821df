"""The PARD drafter (a same-family causal LM plus a mask token): config, model, candidate generator.

See docs/pard.md. This is the one place the kind is registered.
"""

from ..block_drafter.policy import BlockPolicy
from ..registry import KindCard, register_drafter_kind
from .configuration_pard import PardConfig
from .generation_pard import PardCandidateGenerator
from .modeling_pard import PardDrafter

KIND = register_drafter_kind(
    PardDrafter,
    PardCandidateGenerator,
    config_class=PardConfig,
    policy_class=BlockPolicy,  # a pass drafts every slot without the drafts before it: q is prefix-independent
    card=KindCard(
        "A parallel drafter adapted from a pretrained causal LM of the target's family (PARD)",
        detail="It drafts a whole block in one forward: the committed tokens, then mask tokens whose outputs are "
        "the later drafts.",
        tags=("pard",),
    ),
)

__all__ = ["PardCandidateGenerator", "PardConfig", "PardDrafter"]
