"""DBLAST: a block drafter whose block distribution is a low-rank latent mixture, so a sampled block follows one
mode. Config, model, mixture math, candidate generator, policy.

See docs/dblast.md. This is the one place the kind is registered.
"""

from ..registry import KindCard, register_drafter_kind
from .configuration_dblast import DBLASTConfig
from .generation_dblast import DBLASTCandidateGenerator
from .modeling_dblast import DBLASTDrafter
from .policy import DBLASTPolicy

KIND = register_drafter_kind(
    DBLASTDrafter,
    DBLASTCandidateGenerator,
    config_class=DBLASTConfig,
    policy_class=DBLASTPolicy,
    card=KindCard(
        "A DBLAST drafter (a DFlash-style block drafter with a latent mixture head)",
        "Its mixture head ties a drafted block's positions together, so a block sampled at temperature follows one "
        "mode instead of mixing modes position by position; greedy decoding drafts the most likely component's "
        "block.",
        ("dblast",),
    ),
)

__all__ = ["DBLASTCandidateGenerator", "DBLASTConfig", "DBLASTDrafter", "DBLASTPolicy"]
