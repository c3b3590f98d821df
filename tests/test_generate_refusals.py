"""What a drafted generate() cannot do exactly it refuses, saying what to do; drafter and target dtypes may differ.

Each refusal is a case that used to give silently different output or an unexplained crash: a cache that already
holds part of the prompt, `inputs_embeds` in hf_specdec's own loop, classifier-free guidance, SynthID
watermarking, DoLa. A bf16 drafter (as shipped) with an fp32 target used to fail with a dtype error; it now gives
plain greedy's tokens. transformers' assisted-generation settings that have no drafter equivalent are refused with
an error naming what to set instead (the mapped ones: tests/test_transformers_seam.py).
"""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from conftest import VOCAB, make_drafter, tiny_target
from transformers import (
    DynamicCache,
    GenerationConfig,
    LogitsProcessorList,
    SynthIDTextWatermarkingConfig,
    WatermarkingConfig,
)
from transformers.generation.logits_process import UnbatchedClassifierFreeGuidanceLogitsProcessor

from hf_specdec import BlockDrafter, DCOCODrafter, DecodingSettings, PardDrafter, SpeculativeServer

CHAIN = DecodingSettings(budget="fixed", sampled_drafts="argmax")  # transformers' assisted loop
TREE = DecodingSettings(budget="fixed", tree_budget=6)  # hf_specdec's loop
AUTO = DecodingSettings()  # the default: hf_specdec's loop, adaptive budget
LOOPS = {"chain": CHAIN, "tree": TREE, "auto": AUTO}


@pytest.fixture
def setup():
    target = tiny_target("llama")
    g = torch.Generator().manual_seed(7)
    return target, make_drafter(target, 4), torch.randint(3, VOCAB - 1, (1, 12), generator=g)


def cache_of(target, ids: torch.LongTensor) -> DynamicCache:
    """A DynamicCache holding the target's keys and values of `ids`."""
    cache = DynamicCache()
    name = "cache" if "cache" in inspect.signature(target.forward).parameters else "past_key_values"
    with torch.no_grad():
        target(ids, **{name: cache}, use_cache=True)
    return cache


@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")  # transformers 5.24 names it cache
@pytest.mark.parametrize("loop", LOOPS)
def test_a_cache_holding_part_of_the_prompt_is_refused_where_plain_generate_continues(setup, loop):
    target, drafter, prompt = setup
    drafter.decoding = LOOPS[loop]
    cache = cache_of(target, prompt[:, :8])
    plain = target.generate(prompt, past_key_values=copy.deepcopy(cache), max_new_tokens=8, do_sample=False)
    assert torch.equal(plain, target.generate(prompt, max_new_tokens=8, do_sample=False))
    with pytest.raises(ValueError, match="past_key_values already holds 8 tokens.*without assistant_model"):
        target.generate(prompt, past_key_values=cache, max_new_tokens=8, do_sample=False, assistant_model=drafter)


@pytest.mark.parametrize("loop", ["tree", "auto"])
def test_inputs_embeds_in_hf_specdecs_loop_is_refused(setup, loop):
    target, drafter, prompt = setup
    drafter.decoding = LOOPS[loop]
    embeds = target.get_input_embeddings()(prompt).detach()
    with pytest.raises(ValueError, match="inputs_embeds is not supported.*Pass input_ids"):
        target.generate(inputs_embeds=embeds, max_new_tokens=6, do_sample=False, assistant_model=drafter)


def test_inputs_embeds_in_a_batch_is_refused(setup):
    target, drafter, _ = setup
    embeds = target.get_input_embeddings()(torch.randint(3, VOCAB - 1, (2, 6))).detach()
    with pytest.raises(ValueError, match="inputs_embeds is not supported"):
        target.generate(inputs_embeds=embeds, max_new_tokens=6, do_sample=False, assistant_model=drafter)


def test_inputs_embeds_in_transformers_chain_loop_gives_plain_output(setup):
    target, drafter, prompt = setup
    drafter.decoding = CHAIN
    embeds = target.get_input_embeddings()(prompt).detach()
    plain = target.generate(inputs_embeds=embeds, max_new_tokens=10, do_sample=False)
    out = target.generate(inputs_embeds=embeds, max_new_tokens=10, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, plain)


@pytest.mark.parametrize("loop", LOOPS)
def test_classifier_free_guidance_is_refused(setup, loop):
    target, drafter, prompt = setup
    drafter.decoding = LOOPS[loop]
    with pytest.raises(ValueError, match="guidance_scale=1.5.*without assistant_model"):
        target.generate(prompt, max_new_tokens=6, guidance_scale=1.5, assistant_model=drafter)
    target.generate(prompt, max_new_tokens=2, guidance_scale=1.0, assistant_model=drafter)  # 1 = off: accepted


def test_a_stateful_processor_passed_in_is_refused(setup):
    target, drafter, prompt = setup
    guidance = UnbatchedClassifierFreeGuidanceLogitsProcessor(1.5, target)
    with pytest.raises(ValueError, match="UnbatchedClassifierFreeGuidanceLogitsProcessor"):
        target.generate(
            prompt, max_new_tokens=6, logits_processor=LogitsProcessorList([guidance]), assistant_model=drafter
        )


def test_synthid_watermarking_and_dola_are_refused(setup):
    target, drafter, prompt = setup
    synthid = SynthIDTextWatermarkingConfig(keys=[654, 400, 836, 123, 340, 443, 597, 160, 57], ngram_len=3)
    with pytest.raises(ValueError, match="SynthID watermarking is not supported"):
        target.generate(prompt, max_new_tokens=6, do_sample=True, watermarking_config=synthid, assistant_model=drafter)
    with pytest.raises(ValueError, match="dola_layers"):
        target.generate(prompt, max_new_tokens=6, dola_layers="high", assistant_model=drafter)


@pytest.mark.parametrize("loop", LOOPS)
def test_green_list_watermarking_gives_plain_output(setup, loop):
    target, drafter, prompt = setup
    drafter.decoding = LOOPS[loop]
    marks = WatermarkingConfig(bias=6.0)  # a large bias: the watermark changes the greedy text
    plain = target.generate(prompt, max_new_tokens=16, do_sample=False, watermarking_config=marks)
    assert not torch.equal(plain, target.generate(prompt, max_new_tokens=16, do_sample=False))
    out = target.generate(
        prompt, max_new_tokens=16, do_sample=False, watermarking_config=marks, assistant_model=drafter
    )
    assert torch.equal(out, plain)


@pytest.mark.parametrize("cls", [BlockDrafter, DCOCODrafter])
@pytest.mark.parametrize("loop", LOOPS)
def test_a_bf16_drafter_with_an_fp32_target_gives_plain_greedy_output(setup, cls, loop):
    target, _, prompt = setup
    drafter = make_drafter(target, 4, cls=cls).to(torch.bfloat16)
    drafter.decoding = LOOPS[loop]
    plain = target.generate(prompt, max_new_tokens=16, do_sample=False)
    out = target.generate(prompt, max_new_tokens=16, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, plain)
    assert drafter.last_acceptance_stats.verify_forwards > 0  # the bf16 drafter drafted and was verified
    batch = torch.cat([prompt, prompt.flip(-1)])  # a batch: hf_specdec's loop, one drafter per row
    plain = target.generate(batch, max_new_tokens=8, do_sample=False)
    assert torch.equal(target.generate(batch, max_new_tokens=8, do_sample=False, assistant_model=drafter), plain)


def test_an_fp32_drafter_with_a_bf16_target_drafts(setup):
    """The other way round the drafter reads bf16 features and scores with a bf16 head: it runs and is verified."""
    _, _, prompt = setup
    target = tiny_target("llama").to(torch.bfloat16)
    drafter = make_drafter(target, 4).float()
    drafter.decoding = TREE
    out = target.generate(prompt, max_new_tokens=12, do_sample=False, assistant_model=drafter)
    assert out.shape == (1, prompt.shape[1] + 12) and drafter.last_acceptance_stats.verify_forwards > 0


# transformers' setting -> what its refusal must name (the equivalent, or why there is none)
REFUSED = {
    "num_assistant_tokens": (5, r"block_size - 1 = 3 tokens per step.*DecodingSettings\(budget=..., tree_budget"),
    "assistant_confidence_threshold": (0.3, r"no equivalent.*DecodingSettings\(budget='auto'\)"),
    "assistant_lookbehind": (4, r"another tokenizer.*drafts the target's own tokens"),
    "target_lookbehind": (4, r"another tokenizer.*drafts the target's own tokens"),
    "assistant_ensemble_weight": (0.5, r"not lossless.*verifies against the target alone"),
    "assistant_early_exit": (2, r"selects another drafting method"),
    "use_mtp": (True, r"selects another drafting method"),
}


@pytest.mark.parametrize("how", ["kwargs", "generation_config"])
@pytest.mark.parametrize("knob", REFUSED)
def test_transformers_settings_without_an_equivalent_are_refused_naming_what_to_set(setup, knob, how):
    target, drafter, prompt = setup
    value, names = REFUSED[knob]
    with pytest.raises(ValueError, match=rf"{knob}={value!r} .*{names}"):
        if how == "kwargs":
            target.generate(prompt, max_new_tokens=6, assistant_model=drafter, **{knob: value})
        else:
            config = GenerationConfig(max_new_tokens=6, **{knob: value})
            target.generate(prompt, generation_config=config, assistant_model=drafter)


def test_speculation_type_dflash_is_refused_for_a_drafter_that_is_not_dflash_style(setup):
    """A block drafter runs with speculation_type="dflash" (tests/test_formats_native.py); a PARD drafter does not."""
    target, _, prompt = setup
    lm = tiny_target("llama", seed=4, layers=1)
    pard = PardDrafter.from_causal_lm(lm, target, mask_token_id=VOCAB - 1, block_size=4).eval()
    with pytest.raises(ValueError, match=r"speculation_type='dflash' .*PardDrafter is not a DFlash-style drafter"):
        target.generate(prompt, max_new_tokens=4, assistant_model=pard, speculation_type="dflash")


def test_a_default_counts_only_when_passed(setup):
    """transformers fills num_assistant_tokens=20 when unset: a call that does not pass it is served, one that passes
    the same value is refused."""
    target, drafter, prompt = setup
    target.generate(prompt, max_new_tokens=4, assistant_model=drafter)
    with pytest.raises(ValueError, match="num_assistant_tokens=20 .*block_size"):
        target.generate(prompt, max_new_tokens=4, assistant_model=drafter, num_assistant_tokens=20)


@pytest.mark.parametrize(
    "passed, names",
    [
        ({"max_matching_ngram_size": 2}, r"prompt lookup is off.*prompt_lookup_num_tokens=N too"),
        ({"prompt_lookup_num_tokens": -1}, r"prompt_lookup_num_tokens=-1 sets .*prompt_lookup_tokens.*>= 0"),
        ({"num_assistant_tokens_schedule": "sometimes"}, r"schedules are \['constant'.*DecodingSettings.budget"),
    ],
)
def test_a_mapped_setting_the_drafter_cannot_take_says_why(setup, passed, names):
    target, drafter, prompt = setup
    with pytest.raises(ValueError, match=names):
        target.generate(prompt, max_new_tokens=4, assistant_model=drafter, **passed)


def test_the_server_refuses_mapped_settings_naming_the_drafters_field(setup):
    """The server serves every request with the drafter's own settings: it names the field to set instead."""
    target, drafter, _ = setup
    with pytest.raises(ValueError, match=r"drafter.decoding = DecodingSettings\(prompt_lookup_tokens=4"):
        SpeculativeServer(target, drafter, prompt_lookup_num_tokens=4)
    with pytest.raises(ValueError, match=r"num_assistant_tokens=5 .*block_size - 1 = 3"):
        SpeculativeServer(target, drafter, num_assistant_tokens=5)
