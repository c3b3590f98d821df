"""The DBLAST head: a low-rank latent mixture over a block's positions, so a sampled block follows one mode.
Config, module, mixture math, proposals, policy; attach it to any base with `attach_head(drafter, "dblast", ...)`.

See docs/dblast.md. This is the one place the head is registered.
"""

from ...registry import DrafterHead, KindCard, register_head
from .config import DBLASTHeadConfig
from .module import LatentMixtureHead
from .policy import DBLASTPolicy
from .proposals import DBLASTProposals

HEAD = register_head(
    DrafterHead(
        name="dblast",
        config_class=DBLASTHeadConfig,
        module_class=LatentMixtureHead,
        proposals_class=DBLASTProposals,
        policy_class=DBLASTPolicy,
        card=KindCard(
            "Its DBLAST mixture head ties a drafted block's positions together through a latent component, so a "
            "block sampled at temperature follows one mode instead of mixing modes position by position; "
            "acceptance uses their exact conditionals, and greedy decoding drafts the most likely component's block.",
            tags=("dblast",),
        ),
        attr="mixture_head",
    )
)

__all__ = ["DBLASTHeadConfig", "DBLASTPolicy", "DBLASTProposals", "LatentMixtureHead"]
