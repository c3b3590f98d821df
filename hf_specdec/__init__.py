"""hf_specdec: parallel block drafters for Hugging Face `generate()`, lossless.

    import hf_specdec
    drafter = hf_specdec.BlockDrafter.from_pretrained("path/or/repo")
    out = target.generate(**inputs, assistant_model=drafter, max_new_tokens=128)
    print(drafter.last_acceptance_stats.tau)

Importing the package registers every drafter kind (one folder each under `models/`, one `register_drafter_kind`
call each: Auto classes, `load_drafter`, generators, policies, cards) and routes
`generate(assistant_model=<hf_specdec drafter>)` to its kind's candidate generator. Layout: README "Architecture".

Shape letters used throughout: B batch, T committed length, K block size (anchor included), k drafted tokens,
C context rows, N tree nodes, V vocab, H hidden, L tapped target layers; p is the target distribution, q the draft.
"""

from .decoding import transformers_seam
from .decoding.server import Request, SpeculativeServer
from .decoding.step_cost import cost_model
from .hub import publish_drafter, render_card
from .models.block_drafter import BlockDraftCandidateGenerator, BlockDrafter, BlockDrafterConfig, build_target_layer_ids
from .models.dblast import DBLASTCandidateGenerator, DBLASTConfig, DBLASTDrafter
from .models.dcoco import DCOCOCandidateGenerator, DCOCOConfig, DCOCODrafter
from .models.lm_head_strides import fix_lm_head_strides
from .models.loading import load_drafter
from .models.pard import PardCandidateGenerator, PardConfig, PardDrafter
from .models.pard_dblast import PardDBLASTCandidateGenerator, PardDBLASTConfig, PardDBLASTDrafter
from .models.pard_dcoco import PardDCOCOCandidateGenerator, PardDCOCOConfig, PardDCOCODrafter
from .models.registry import DrafterKind, KindCard, register_drafter_kind
from .models.settings import DecodingSettings
from .verification.stats import AcceptanceStats

__version__ = "0.1.0"

transformers_seam.install()

__all__ = [
    "AcceptanceStats",
    "BlockDraftCandidateGenerator",
    "BlockDrafter",
    "BlockDrafterConfig",
    "DBLASTCandidateGenerator",
    "DBLASTConfig",
    "DBLASTDrafter",
    "DCOCOCandidateGenerator",
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
    "PardDBLASTCandidateGenerator",
    "PardDBLASTConfig",
    "PardDBLASTDrafter",
    "PardDCOCOCandidateGenerator",
    "PardDCOCOConfig",
    "PardDCOCODrafter",
    "publish_drafter",
    "register_drafter_kind",
    "render_card",
    "Request",
    "SpeculativeServer",
]
