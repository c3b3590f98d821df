"""hf_specdec: parallel block drafters for Hugging Face `generate()`, lossless.

    import hf_specdec
    drafter = hf_specdec.BlockDrafter.from_pretrained("path/or/repo")
    out = target.generate(**inputs, assistant_model=drafter, max_new_tokens=128)
    print(drafter.last_acceptance_stats.tau)

Importing the package registers the drafter classes with `AutoConfig`/`AutoModel` and routes
`generate(assistant_model=<hf_specdec drafter>)` to hf_specdec's candidate generator.

Shape letters used throughout: B batch, T committed length, K block size (anchor included), k drafted tokens,
C context rows, N tree nodes, V vocab, H hidden, L tapped target layers; p is the target distribution, q the draft.
"""

from transformers import AutoConfig, AutoModel

from .correction.generator import DCOCOCandidateGenerator
from .decoding import transformers_seam
from .decoding.candidate_generator import BlockDraftCandidateGenerator
from .decoding.dblast_generator import DBLASTCandidateGenerator
from .decoding.lm_head_strides import fix_lm_head_strides
from .decoding.registry import register_drafter_kind
from .decoding.server import Request, SpeculativeServer
from .decoding.settings import DecodingSettings
from .decoding.stats import AcceptanceStats
from .drafting.configuration_block_drafter import BlockDrafterConfig, build_target_layer_ids
from .drafting.configuration_dblast import DBLASTConfig
from .drafting.configuration_dcoco import DCOCOConfig
from .drafting.loading import load_drafter
from .drafting.modeling_block_drafter import BlockDrafter
from .drafting.modeling_dblast import DBLASTDrafter
from .drafting.modeling_dcoco import DCOCODrafter
from .hub import publish_drafter, render_card

__version__ = "0.1.0"

AutoConfig.register(BlockDrafterConfig.model_type, BlockDrafterConfig, exist_ok=True)
AutoModel.register(BlockDrafterConfig, BlockDrafter, exist_ok=True)
AutoConfig.register(DCOCOConfig.model_type, DCOCOConfig, exist_ok=True)
AutoModel.register(DCOCOConfig, DCOCODrafter, exist_ok=True)
register_drafter_kind(BlockDrafter, BlockDraftCandidateGenerator)
register_drafter_kind(DCOCODrafter, DCOCOCandidateGenerator)
AutoConfig.register(DBLASTConfig.model_type, DBLASTConfig, exist_ok=True)
AutoModel.register(DBLASTConfig, DBLASTDrafter, exist_ok=True)
register_drafter_kind(DBLASTDrafter, DBLASTCandidateGenerator)
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
    "build_target_layer_ids",
    "fix_lm_head_strides",
    "load_drafter",
    "publish_drafter",
    "register_drafter_kind",
    "render_card",
    "Request",
    "SpeculativeServer",
]
