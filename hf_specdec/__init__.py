"""hf_specdec: parallel block drafters for Hugging Face `generate()`, lossless.

    import hf_specdec
    drafter = hf_specdec.BlockDrafter.from_pretrained("path/or/repo")
    out = target.generate(**inputs, assistant_model=drafter, max_new_tokens=128)
    print(drafter.last_acceptance_stats.tau)

Importing the package registers every drafter base and head (one folder each under `models/`, one `register_base`
or `register_head` call each: Auto classes, `load_drafter`, generators, policies, cards) and routes
`generate(assistant_model=<hf_specdec drafter>)` to its base's candidate generator, which its head (if any) reads.
A head goes on any base with `attach_head(drafter, "dcoco" | "dblast", ...)`. Layout: README "Architecture".

Shape letters used throughout: B batch, T committed length, K block size (anchor included), k drafted tokens,
C context rows, N tree nodes, V vocab, H hidden, L tapped target layers; p is the target distribution, q the draft.
"""

from .decoding import transformers_seam
from .decoding.server import Request, SpeculativeServer
from .decoding.step_cost import cost_model
from .hub import publish_drafter, render_card
from .models.aliases import (
    DBLASTConfig,
    DBLASTDrafter,
    DCOCOConfig,
    DCOCODrafter,
    PardDBLASTConfig,
    PardDBLASTDrafter,
    PardDCOCOConfig,
    PardDCOCODrafter,
)
from .models.attach import attach_head, load_head_folder, save_head
from .models.block_drafter import BlockDraftCandidateGenerator, BlockDrafter, BlockDrafterConfig, build_target_layer_ids
from .models.formats import export_drafter
from .models.lm_head_strides import fix_lm_head_strides
from .models.loading import load_drafter
from .models.pard import PardCandidateGenerator, PardConfig, PardDrafter
from .models.registry import (
    Capabilities,
    DrafterHead,
    DrafterKind,
    HeadModule,
    KindCard,
    head_of,
    register_base,
    register_drafter_kind,
    register_head,
)
from .models.settings import DecodingSettings
from .verification.stats import AcceptanceStats

__version__ = "0.1.0"

transformers_seam.install()

__all__ = [
    "AcceptanceStats",
    "Capabilities",
    "DrafterHead",
    "HeadModule",
    "attach_head",
    "export_drafter",
    "head_of",
    "load_head_folder",
    "register_base",
    "register_head",
    "save_head",
    "BlockDraftCandidateGenerator",
    "BlockDrafter",
    "BlockDrafterConfig",
    "DBLASTConfig",
    "DBLASTDrafter",
    "DCOCOConfig",
    "DCOCODrafter",
    "DecodingSettings",
    "DrafterKind",
    "KindCard",
    "build_target_layer_ids",
    "cost_model",
    "fix_lm_head_strides",
    "load_drafter",
    "PardCandidateGenerator",
    "PardConfig",
    "PardDrafter",
    "PardDBLASTConfig",
    "PardDBLASTDrafter",
    "PardDCOCOConfig",
    "PardDCOCODrafter",
    "publish_drafter",
    "register_drafter_kind",
    "render_card",
    "Request",
    "SpeculativeServer",
]
