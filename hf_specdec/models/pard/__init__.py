"""The PARD drafter base (a same-family causal LM plus a mask token): config, model, candidate generator.

See docs/pard.md. This is the one place the base is registered.
"""

from ..policy import BlockPolicy
from ..registry import Capabilities, KindCard, register_base
from .configuration_pard import PardConfig
from .generation_pard import PardCandidateGenerator
from .modeling_pard import PardDrafter

KIND = register_base(
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
    capabilities=Capabilities(
        draft_rows=True,  # PardCandidateGenerator.draft_rows: a batch's rows in one drafter pass
        adapter_folders=True,  # a LoRA adapter over the causal LM, with this base's config beside it
        head_only_saving=True,  # a 0.5B LM under a head of a few MB: heads are saved alone too
        trainable_token_rows=True,  # the mask token's embedding row trains with the adapters
        own_embeddings=True,  # its own token embeddings and LM head
    ),
)

__all__ = ["PardCandidateGenerator", "PardConfig", "PardDrafter"]
