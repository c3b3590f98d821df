"""The one private seam into transformers. If a transformers upgrade moves what it wraps, these fail loudly."""

from __future__ import annotations

import inspect

import torch
from conftest import make_drafter, tiny_target
from transformers.generation.utils import GenerationMixin

from hf_specdec import BlockDraftCandidateGenerator
from hf_specdec.decoding import transformers_seam


def test_wrapped_private_methods_still_exist_with_their_arguments():
    transformers_seam.check_seam()  # raises RuntimeError naming the method that moved


def test_seam_is_installed_at_import():
    assert transformers_seam.is_installed()
    for name in ("_get_candidate_generator", "_validate_generation_mode", "_assisted_decoding"):
        assert getattr(GenerationMixin, name) is getattr(transformers_seam, name)


def test_generate_still_passes_the_arguments_the_loop_needs():
    """generate() hands `_assisted_decoding` the stopping criteria and the loop calls the generator protocol."""
    params = inspect.signature(GenerationMixin._assisted_decoding).parameters
    assert {"stopping_criteria", "logits_processor", "assistant_model"} <= set(params)
    source = inspect.getsource(transformers_seam._original["_assisted_decoding"])
    for needle in ("requires_model_outputs", "model_kwargs_overrides", "n_last_matches", "update_candidate_strategy"):
        assert needle in source, f"transformers' assisted loop no longer uses `{needle}`"


def test_generate_routes_our_drafter_to_our_generator(monkeypatch):
    target = tiny_target("qwen3")
    drafter = make_drafter(target, 4)
    made = []
    original_init = BlockDraftCandidateGenerator.__init__

    def spy(self, *args, **kwargs):
        made.append(self)
        original_init(self, *args, **kwargs)

    monkeypatch.setattr(BlockDraftCandidateGenerator, "__init__", spy)
    target.generate(torch.randint(3, 250, (1, 8)), max_new_tokens=6, assistant_model=drafter)
    assert len(made) == 1 and made[0].stats is drafter.last_acceptance_stats
    assert made[0].stats.verify_forwards == 5
