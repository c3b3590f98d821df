"""Settings a drafted generate() cannot honour are refused with errors that say what to change."""

from __future__ import annotations

import pytest
import torch
from conftest import make_drafter, tiny_target
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, StaticCache


@pytest.fixture
def setup():
    target = tiny_target("llama")
    return target, make_drafter(target, 4), torch.randint(3, 250, (1, 10))


def other_target(**changes):
    cfg = (
        dict(
            vocab_size=256,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
        | changes
    )
    return LlamaForCausalLM(LlamaConfig(**cfg)).eval()


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(hidden_size=32, num_attention_heads=2, num_key_value_heads=1), "hidden size 64 != target's 32"),
        (dict(num_hidden_layers=6), "layer count 4 != target's 6"),
        (dict(vocab_size=300), "vocab size 256 != target's 300"),
    ],
)
def test_drafter_built_for_another_target(setup, changes, message):
    _, drafter, prompt = setup
    with pytest.raises(ValueError, match=message):
        other_target(**changes).generate(prompt, max_new_tokens=4, assistant_model=drafter)


def test_drafter_for_a_shallower_target_reports_its_taps(setup):
    _, drafter, prompt = setup
    drafter.config.target_num_hidden_layers = None  # identity unknown: the taps still give it away
    with pytest.raises(ValueError, match="tapped layers"):
        other_target(num_hidden_layers=2).generate(prompt, max_new_tokens=4, assistant_model=drafter)


def test_batches_refuse_what_they_cannot_return(setup):
    target, drafter, _ = setup
    batch = torch.randint(3, 250, (2, 8))
    with pytest.raises(ValueError, match="return_dict_in_generate"):
        target.generate(batch, max_new_tokens=4, assistant_model=drafter, return_dict_in_generate=True)
    target.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="per-row mask"):
        target.generate(batch, max_new_tokens=4, assistant_model=drafter)


def test_beam_search_is_refused_not_silently_ignored(setup):
    target, drafter, prompt = setup
    with pytest.raises(ValueError, match="beam search"):
        target.generate(prompt, max_new_tokens=4, num_beams=2, assistant_model=drafter)


def test_num_return_sequences(setup):
    target, drafter, prompt = setup
    with pytest.raises(ValueError, match="num_return_sequences=2"):
        target.generate(prompt, max_new_tokens=4, do_sample=True, num_return_sequences=2, assistant_model=drafter)


def test_static_cache_setting(setup):
    target, drafter, prompt = setup
    with pytest.raises(ValueError, match="cache_implementation='static'"):
        target.generate(prompt, max_new_tokens=4, cache_implementation="static", assistant_model=drafter)


def test_static_cache_object(setup):
    target, drafter, prompt = setup
    cache = StaticCache(config=target.config, max_cache_len=64)
    # transformers 5.23 refuses it first with its own message; 5.24 leaves it to us
    with pytest.raises(ValueError, match="StaticCache is not supported|not supported with Static cache"):
        target.generate(prompt, max_new_tokens=4, past_key_values=cache, assistant_model=drafter)


def test_use_cache_false(setup):
    target, drafter, prompt = setup
    with pytest.raises(ValueError, match="use_cache=True"):
        target.generate(prompt, max_new_tokens=4, use_cache=False, assistant_model=drafter)


@pytest.mark.parametrize("other", [{"assistant_early_exit": 2}, {"use_mtp": True}])
def test_other_drafting_methods_conflict(setup, other):
    target, drafter, prompt = setup
    with pytest.raises(ValueError, match=f"{next(iter(other))}=.* selects another drafting method"):
        target.generate(prompt, max_new_tokens=4, assistant_model=drafter, **other)


def test_a_dynamic_cache_passed_in_is_fine(setup):
    target, drafter, prompt = setup
    ref = target.generate(prompt, do_sample=False, max_new_tokens=6)
    out = target.generate(
        prompt, do_sample=False, max_new_tokens=6, past_key_values=DynamicCache(), assistant_model=drafter
    )
    assert torch.equal(out, ref)


def test_plain_assisted_generation_is_untouched():
    """A same-vocab transformers model as assistant still takes transformers' own path."""
    target, helper = tiny_target("llama", seed=0), tiny_target("llama", seed=0)
    prompt = torch.randint(3, 250, (1, 10))
    ref = target.generate(prompt, do_sample=False, max_new_tokens=10)
    out = target.generate(prompt, do_sample=False, max_new_tokens=10, assistant_model=helper)
    assert torch.equal(out, ref)
    with pytest.raises(ValueError, match="batch_size = 1"):  # transformers' own message, not ours
        target.generate(torch.randint(3, 250, (2, 8)), max_new_tokens=4, assistant_model=helper)


@pytest.mark.parametrize("do_sample", [False, True])
def test_own_loop_refuses_batches_and_unsupported_attention(setup, do_sample):
    from hf_specdec import DecodingSettings

    target, drafter, prompt = setup
    drafter.decoding = DecodingSettings(tree_budget=6)
    target.config._attn_implementation = "flash_attention_2"  # takes no custom mask; refused before any forward
    from hf_specdec.decoding.batch import Row, SpeculativeBatch
    from hf_specdec.decoding.step import verification_inputs
    from hf_specdec.verification.tree import DraftTree

    tree = DraftTree()
    tree.add(5, -1)
    tree.add(6, -1)
    batch = SpeculativeBatch(target, drafter, target.generation_config)
    batch.rows = [Row(prompt, prompt.shape[1], None, 100)]
    batch.valid = torch.ones(1, prompt.shape[1] - 1, dtype=torch.bool)
    with pytest.raises(ValueError, match="attn_implementation='sdpa'"):
        verification_inputs(batch, [tree])
