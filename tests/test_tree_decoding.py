"""hf_specdec's own loop (trees, prompt-lookup branches) under greedy decoding: output equals plain greedy
`generate`, token for token (fp32), with drafters that accept none, all and exactly j tokens; streamers, stopping
criteria and scores behave as in plain `generate`; the KV cache after a call equals a fresh forward."""

from __future__ import annotations

import pytest
import torch
from conftest import make_drafter, oracle, tiny_target
from test_generate_behaviour import Recorder, StopAfterToken

from hf_specdec import BlockDrafter, DecodingSettings

NEW_TOKENS = 29
TREES = [
    DecodingSettings(budget="fixed", tree_budget=3, tree_topk=2),
    DecodingSettings(budget="fixed", tree_budget=9, tree_topk=3),
    DecodingSettings(budget="fixed", tree_budget=24, tree_topk=4, prompt_lookup_tokens=5),
]


@pytest.fixture
def target(target, device):  # every test here runs on each device present (conftest.DEVICES)
    return target.to(device)


@pytest.fixture
def prompt(prompt, device):
    return prompt.to(device)


def _ids(settings):
    return f"budget{settings.tree_budget}-top{settings.tree_topk}-lookup{settings.prompt_lookup_tokens}"


def plain(target, prompt, **kwargs):
    return target.generate(prompt, do_sample=False, eos_token_id=None, **kwargs)


@pytest.mark.parametrize("settings", TREES, ids=_ids)
@pytest.mark.parametrize("block_size", [3, 5, 8])
@pytest.mark.parametrize("accept", ["none", "all", "j"])
def test_tree_oracles_give_plain_greedy_output(target, prompt, block_size, accept, settings):
    k = block_size - 1
    j = {"none": 0, "all": None, "j": max(1, k // 2)}[accept]
    drafter = oracle(target, prompt, block_size, j, NEW_TOKENS, eos_token_id=None)
    drafter.reference_rank = 50  # the right token is never in the tree at the corrupted position
    drafter.decoding = settings
    out = plain(target, prompt, max_new_tokens=NEW_TOKENS, assistant_model=drafter)
    assert torch.equal(out, plain(target, prompt, max_new_tokens=NEW_TOKENS))
    stats = drafter.last_acceptance_stats
    expected = k if j is None else j
    if settings.tree_budget >= 2 * k and not settings.prompt_lookup_tokens:
        assert set(stats.accepted[:-1]) == {expected}
    assert max(stats.accepted) <= expected or settings.prompt_lookup_tokens
    assert stats.committed_tokens == NEW_TOKENS - 1


@pytest.mark.parametrize("block_size", [4, 8])
def test_a_tree_accepts_the_runner_up_a_chain_misses(target, prompt, block_size):
    k, j = block_size - 1, 1
    chain = oracle(target, prompt, block_size, j, NEW_TOKENS, eos_token_id=None)  # right token ranks second at j
    out_chain = plain(target, prompt, max_new_tokens=NEW_TOKENS, assistant_model=chain)
    tree = oracle(target, prompt, block_size, j, NEW_TOKENS, eos_token_id=None)
    tree.decoding = DecodingSettings(budget="fixed", tree_budget=2 * k, tree_topk=2)
    out_tree = plain(target, prompt, max_new_tokens=NEW_TOKENS, assistant_model=tree)
    assert torch.equal(out_chain, out_tree)
    assert set(chain.last_acceptance_stats.accepted[:-1]) == {j}
    assert set(tree.last_acceptance_stats.accepted[:-1]) == {k}


@pytest.mark.parametrize("settings", TREES + [DecodingSettings(budget="fixed", prompt_lookup_tokens=6)], ids=_ids)
@pytest.mark.parametrize("block_size", [2, 4, 16])
def test_untrained_drafter_trees_give_plain_greedy_output(target, prompt, block_size, settings):
    drafter = make_drafter(target, block_size)
    drafter.decoding = settings
    out = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=drafter)
    assert torch.equal(out, target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS))


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_prompt_lookup_branches_are_accepted_on_repetitive_text(arch, device):
    """A vocabulary of 8 makes the target's text repeat; lookup branches then commit several tokens per forward."""
    target = tiny_target(arch, vocab=8, device=device)
    prompt = torch.tensor([[1, 3, 4, 5, 3, 4, 6, 7, 3]], device=device)
    torch.manual_seed(1)
    drafter = BlockDrafter.for_target(target, block_size=4, mask_token_id=7).eval()
    drafter.decoding = DecodingSettings(budget="fixed", prompt_lookup_tokens=6)
    out = plain(target, prompt, max_new_tokens=60, assistant_model=drafter)
    assert torch.equal(out, plain(target, prompt, max_new_tokens=60))
    stats = drafter.last_acceptance_stats
    assert stats.tau > 1.2 and len(stats.histogram) == max(4, max(stats.accepted) + 1)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("eos_offset", [2, 7])
def test_eos_inside_a_tree_step(attn, eos_offset, prompt):
    target = tiny_target("llama", attn=attn, device=prompt.device)
    free = plain(target, prompt, max_new_tokens=NEW_TOKENS)
    eos = int(free[0, prompt.shape[1] + eos_offset])
    ref = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=eos)
    drafter = oracle(target, prompt, 6, None, NEW_TOKENS)
    drafter.decoding = DecodingSettings(budget="fixed", tree_budget=10, tree_topk=2)
    out = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=eos, assistant_model=drafter)
    assert torch.equal(out, ref)


@pytest.mark.parametrize("max_new_tokens", [1, 2, 5, 11])
def test_max_length_inside_a_tree_step(target, prompt, max_new_tokens):
    drafter = oracle(target, prompt, 8, None, max_new_tokens, eos_token_id=None)
    drafter.decoding = DecodingSettings(budget="fixed", tree_budget=12, tree_topk=2, prompt_lookup_tokens=4)
    out = plain(target, prompt, max_new_tokens=max_new_tokens, assistant_model=drafter)
    assert torch.equal(out, plain(target, prompt, max_new_tokens=max_new_tokens))


def test_streamer_scores_and_stopping_criteria_match_plain(target, prompt):
    free = plain(target, prompt, max_new_tokens=NEW_TOKENS)
    stop = StopAfterToken(int(free[0, prompt.shape[1] + 9]))
    plain_rec, spec_rec = Recorder(), Recorder()
    common = dict(max_new_tokens=NEW_TOKENS, return_dict_in_generate=True, output_scores=True, output_logits=True)
    ref = plain(target, prompt, streamer=plain_rec, stopping_criteria=[stop], **common)
    drafter = oracle(target, prompt, 6, 3, NEW_TOKENS, eos_token_id=None)
    drafter.decoding = DecodingSettings(budget="fixed", tree_budget=8, tree_topk=2)
    out = plain(target, prompt, streamer=spec_rec, stopping_criteria=[stop], assistant_model=drafter, **common)
    assert torch.equal(out.sequences, ref.sequences)
    flat = lambda chunks: [t for c in chunks for t in c]  # noqa: E731
    assert flat(spec_rec.chunks) == flat(plain_rec.chunks) and spec_rec.ended == 1
    assert len(out.scores) == len(ref.scores) == len(out.logits)
    for a, b in zip(out.scores, ref.scores, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("do_sample", [False, True])
@pytest.mark.parametrize("settings", TREES[1:], ids=_ids)
def test_cache_after_generate_equals_a_fresh_forward(target, prompt, do_sample, settings):
    drafter = oracle(target, prompt, 5, 2, NEW_TOKENS, eos_token_id=None)
    drafter.decoding = settings
    torch.manual_seed(0)
    out = target.generate(
        prompt,
        do_sample=do_sample,
        max_new_tokens=NEW_TOKENS,
        eos_token_id=None,
        assistant_model=drafter,
        return_dict_in_generate=True,
    )
    seq = out.sequences
    cache = getattr(out, "cache", None) or out.past_key_values
    assert cache.get_seq_length() == seq.shape[1] - 1
    with torch.no_grad():
        cached = target(seq[:, -1:], cache=cache).logits[0, -1]
        fresh = target(seq).logits[0, -1]
    torch.testing.assert_close(cached, fresh, atol=1e-4, rtol=1e-4)


def test_own_loop_refuses_what_it_does_not_return(target, prompt):
    drafter = make_drafter(target, 4)
    drafter.decoding = DecodingSettings(budget="fixed", tree_budget=6)
    with pytest.raises(ValueError, match="output_attentions"):
        target.generate(
            prompt, max_new_tokens=4, assistant_model=drafter, return_dict_in_generate=True, output_attentions=True
        )


def test_decoding_settings_are_validated_and_saved(target, tmp_path):
    with pytest.raises(ValueError, match="tree_budget"):
        DecodingSettings(budget="fixed", tree_budget=-1)
    with pytest.raises(ValueError, match="sampled_drafts"):
        DecodingSettings(budget="fixed", sampled_drafts="greedy")
    drafter = make_drafter(target, 4)
    with pytest.raises(ValueError, match="unknown decoding settings"):
        drafter.decoding = {"tree_size": 3}
    drafter.decoding = DecodingSettings(budget="fixed", tree_budget=12, prompt_lookup_tokens=3)
    drafter.save_pretrained(tmp_path)
    assert BlockDrafter.from_pretrained(tmp_path).decoding == drafter.decoding


def test_flex_attention_targets_verify_trees_with_a_block_mask(prompt):
    """transformers runs flex attention through `torch.compile` on every device: on CUDA this is the compiled
    Triton kernel with hf_specdec's tree `BlockMask`, on the CPU inductor's C++ one.

    The reference is the same weights decoded with SDPA: plain flex decoding is not one on every CPU (torch 2.13's
    inductor kernel decodes token 0 once 24 tokens are cached on an AVX2 EPYC, where hf_specdec's flex verify
    still matches SDPA)."""
    from transformers.integrations.flex_attention import WrappedFlexAttention

    target = tiny_target("llama", attn="flex_attention", device=prompt.device)
    twin = tiny_target("llama", device=prompt.device)  # same seed: the target's weights, SDPA attention
    drafter = oracle(twin, prompt, 5, 1, 20, eos_token_id=None)
    drafter.decoding = DecodingSettings(budget="fixed", tree_budget=8, tree_topk=2)
    out = plain(target, prompt, max_new_tokens=20, assistant_model=drafter)
    assert torch.equal(out, plain(twin, prompt, max_new_tokens=20))
    assert drafter.last_acceptance_stats.accepted[0] == 4  # the runner-up at position 1 was verified in the tree
    assert WrappedFlexAttention._instance._is_flex_compiled  # the compiled kernel ran, not eager flex attention
