"""The one private seam into transformers. If a transformers upgrade moves what it wraps, these fail loudly.

transformers' assisted-generation settings with a drafter equivalent set it for one call (`prompt_lookup_num_tokens`
-> `DecodingSettings.prompt_lookup_tokens`, ...) and leave the drafter's saved settings as they were; the refused
ones are in tests/test_generate_refusals.py.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import torch
from conftest import make_drafter, tiny_target
from transformers import GenerationConfig
from transformers.generation.utils import GenerationMixin

from hf_specdec import BlockDraftCandidateGenerator, DecodingSettings
from hf_specdec.decoding import transformers_seam
from hf_specdec.decoding.transformers_names import MAPPED, NAMES

ROOT = Path(__file__).resolve().parents[1]


def test_wrapped_private_methods_still_exist_with_their_arguments():
    transformers_seam.check_seam()  # raises RuntimeError naming the method that moved


def test_seam_is_installed_at_import():
    assert transformers_seam.is_installed()
    for name in transformers_seam._EXPECTED:
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


# --- transformers' names for the drafter's settings, for one call ---------------------------------------------------


@pytest.fixture
def seen(monkeypatch):
    """The drafter's settings as each generator made during a call saw them (both loops make one per row)."""
    settings = []
    original_init = BlockDraftCandidateGenerator.__init__

    def spy(self, drafter, *args, **kwargs):
        settings.append(drafter.decoding)
        original_init(self, drafter, *args, **kwargs)

    monkeypatch.setattr(BlockDraftCandidateGenerator, "__init__", spy)
    return settings


def repeating_prompt() -> torch.LongTensor:
    """A prompt that repeats itself, so prompt lookup finds n-grams to copy."""
    return torch.tensor([[5, 6, 7, 8, 9] * 3])


def test_prompt_lookup_num_tokens_adds_the_lookup_branch_for_the_call_only(seen):
    target = tiny_target("llama")
    drafter = make_drafter(target, 4)
    drafter.decoding = DecodingSettings(budget="fixed")  # every step verifies all it drafts
    saved = dict(drafter.config.decoding)
    prompt = repeating_prompt()
    plain = target.generate(prompt, max_new_tokens=20, do_sample=False)
    out = target.generate(
        prompt, max_new_tokens=20, do_sample=False, assistant_model=drafter, prompt_lookup_num_tokens=4
    )
    assert torch.equal(out, plain)
    assert seen[-1].prompt_lookup_tokens == 4
    assert max(drafter.last_acceptance_stats.drafted) > 3  # the block's 3 drafts plus copied nodes were verified
    assert drafter.config.decoding == saved and drafter.decoding.prompt_lookup_tokens == 0  # the saved ones: unchanged
    out = target.generate(prompt, max_new_tokens=20, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, plain) and max(drafter.last_acceptance_stats.drafted) <= 3  # the next call: no lookup
    batch = torch.cat([prompt, prompt.flip(-1)])  # a batch: the same, in hf_specdec's batched loop
    plain = target.generate(batch, max_new_tokens=8, do_sample=False)
    out = target.generate(batch, max_new_tokens=8, do_sample=False, assistant_model=drafter, prompt_lookup_num_tokens=4)
    assert torch.equal(out, plain) and seen[-1].prompt_lookup_tokens == 4 and drafter.config.decoding == saved


@pytest.mark.parametrize(
    "passed, used",
    [
        ({"prompt_lookup_num_tokens": 4, "max_matching_ngram_size": 1}, {"prompt_lookup_ngram": 1}),
        ({"num_assistant_tokens_schedule": "constant"}, {"budget": "fixed"}),  # the drafter's own: "auto"
        ({"num_assistant_tokens_schedule": "heuristic"}, {"budget": "auto"}),
        ({"num_assistant_tokens_schedule": "heuristic_transient"}, {"budget": "auto"}),
    ],
)
@pytest.mark.parametrize("how", ["kwargs", "generation_config"])
def test_each_mapped_name_sets_its_equivalent_for_the_call(seen, passed, used, how):
    target = tiny_target("llama")
    drafter = make_drafter(target, 4)
    drafter.decoding = DecodingSettings(budget="fixed", prompt_lookup_ngram=3) if used.get("budget") == "auto" else {}
    saved = dict(drafter.config.decoding)
    prompt = repeating_prompt()
    plain = target.generate(prompt, max_new_tokens=12, do_sample=False)
    if how == "kwargs":
        out = target.generate(prompt, max_new_tokens=12, do_sample=False, assistant_model=drafter, **passed)
    else:
        config = GenerationConfig(max_new_tokens=12, do_sample=False, **passed)
        out = target.generate(prompt, generation_config=config, assistant_model=drafter)
    assert torch.equal(out, plain)
    assert {field: getattr(seen[-1], field) for field in used} == used
    assert {field: saved[field] for field in used} != used  # the drafter's own differ: the call's were used
    assert drafter.config.decoding == saved


def test_the_saved_settings_come_back_when_the_call_raises(monkeypatch):
    target = tiny_target("llama")
    drafter = make_drafter(target, 4)
    saved = drafter.config.decoding  # None: a fresh drafter's defaults

    def fails(target, drafter, *args, **kwargs):
        assert drafter.decoding.prompt_lookup_tokens == 4  # inside the call, the call's settings are on the drafter
        raise RuntimeError("stopped")

    monkeypatch.setattr(transformers_seam, "speculative_generate", fails)
    with pytest.raises(RuntimeError, match="stopped"):
        target.generate(repeating_prompt(), max_new_tokens=6, assistant_model=drafter, prompt_lookup_num_tokens=4)
    assert drafter.config.decoding is saved


def test_every_assisted_generation_setting_of_transformers_is_mapped_or_refused():
    """A setting transformers adds to its assisted-generation section needs a row in `transformers_names` (and in
    docs/usage.md's table): mapped onto the drafter's settings, or refused naming the equivalent."""
    section = GenerationConfig.__doc__.split("> Generation parameters exclusive to assistant generation", 1)[1]
    names = re.findall(r"^\s{8}(\w+)\s?\(", section.split("\n        >", 1)[0], re.M)
    assert "num_assistant_tokens" in names  # the section was found
    assert set(names) - {"is_assistant"} <= set(NAMES)
    usage = (ROOT / "docs" / "usage.md").read_text()
    table = usage.split("| transformers setting |", 1)[1].split("\n\n", 1)[0]
    for name in NAMES:
        assert f"`{name}" in table, f"docs/usage.md's table of transformers settings lacks {name}"
    for field in MAPPED.values():
        assert f"`{field}" in table
