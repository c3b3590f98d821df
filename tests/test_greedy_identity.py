"""Greedy output with a drafter equals plain greedy `generate`, token for token (fp32).

Drafters that accept none, all, and exactly j tokens per step; block sizes 2..16; Llama and Qwen3 targets;
EOS and max_length landing inside a block; the drafter's context is exactly the accepted positions.
"""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, make_drafter, oracle, tiny_target

BLOCK_SIZES = [2, 3, 4, 8, 16]


@pytest.fixture
def target(target, device):  # every test here runs on each device present (conftest.DEVICES)
    return target.to(device)


@pytest.fixture
def prompt(prompt, device):
    return prompt.to(device)


NEW_TOKENS = 37  # not a multiple of any block size: the last block is cut by max_length


def plain(target, prompt, **kwargs):
    return target.generate(prompt, do_sample=False, **kwargs)


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("accept", ["none", "all", "j"])
def test_oracle_drafters_give_plain_greedy_output(target, prompt, block_size, accept):
    j = {"none": 0, "all": None, "j": max(1, block_size // 2)}[accept]
    if accept == "j" and block_size == 2:
        j = 1  # one draft per block: accepting exactly j=1 is "all"; corrupt beyond it
    drafter = oracle(target, prompt, block_size, j, NEW_TOKENS, eos_token_id=None)
    ref = plain(target, prompt, max_new_tokens=NEW_TOKENS, eos_token_id=None)
    out = target.generate(
        prompt, do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=None, assistant_model=drafter
    )
    assert torch.equal(out, ref)
    stats = drafter.last_acceptance_stats
    per_step = block_size - 1 if j is None else min(j, block_size - 1)
    # every step but the last (cut by max_length) accepts exactly `per_step` drafts
    assert set(stats.accepted[:-1]) == {per_step}
    assert stats.committed_tokens == NEW_TOKENS - 1  # the prefill commits the first token
    assert stats.tau == pytest.approx((NEW_TOKENS - 1) / stats.verify_forwards)


@pytest.mark.parametrize("block_size", [2, 4, 16])
def test_untrained_drafter_gives_plain_greedy_output(target, prompt, block_size):
    drafter = make_drafter(target, block_size)
    ref = plain(target, prompt, max_new_tokens=NEW_TOKENS)
    out = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=drafter)
    assert torch.equal(out, ref)
    assert drafter.last_acceptance_stats.verify_forwards > 0


@pytest.mark.parametrize("block_size", [4, 8])
@pytest.mark.parametrize("eos_offset", [3, 6])
def test_eos_inside_a_block(target, prompt, block_size, eos_offset):
    """EOS is the token plain greedy emits at `eos_offset`; the oracle drafts through and past it."""
    free = plain(target, prompt, max_new_tokens=NEW_TOKENS, eos_token_id=None)
    eos = int(free[0, prompt.shape[1] + eos_offset])
    ref = plain(target, prompt, max_new_tokens=NEW_TOKENS, eos_token_id=eos)
    drafter = oracle(target, prompt, block_size, None, NEW_TOKENS)
    out = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=eos, assistant_model=drafter)
    assert torch.equal(out, ref)
    assert int(out[0, -1]) == eos and (out[0, prompt.shape[1] : -1] != eos).all()


@pytest.mark.parametrize("block_size", [4, 8, 16])
@pytest.mark.parametrize("max_new_tokens", [1, 2, 5, 11])
def test_max_length_inside_a_block(target, prompt, block_size, max_new_tokens):
    drafter = oracle(target, prompt, block_size, None, max_new_tokens, eos_token_id=None)
    ref = plain(target, prompt, max_new_tokens=max_new_tokens, eos_token_id=None)
    out = target.generate(
        prompt, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=None, assistant_model=drafter
    )
    assert torch.equal(out, ref)
    assert out.shape[1] == prompt.shape[1] + max_new_tokens


@pytest.mark.parametrize("accept", [0, 2, None])
def test_drafter_sees_target_hidden_states_of_exactly_the_accepted_positions(target, prompt, accept):
    block_size = 5
    drafter = oracle(target, prompt, block_size, accept, NEW_TOKENS, eos_token_id=None)
    seen = []
    drafter.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["target_features"].detach().clone()), with_kwargs=True
    )
    out = target.generate(
        prompt, do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=None, assistant_model=drafter
    )
    context = torch.cat(seen, dim=1)  # (1, rows, L*H) every row the drafter was given, in order
    with torch.no_grad():
        hs = target(out, output_hidden_states=True).hidden_states
    full = torch.cat([hs[i + 1] for i in drafter.config.target_layer_ids], dim=-1)
    rows = context.shape[1]
    # incremental (cached) and one-shot forwards agree to float32 rounding; a one-row shift is off by O(1)
    torch.testing.assert_close(context, full[:, :rows], atol=1e-3, rtol=1e-3)
    assert (context[:, 1:] - full[:, : rows - 1]).abs().max() > 0.1
    # each pass's rows start where the previous pass's stopped: positions accepted since then, no more, no less
    starts = torch.tensor([0] + [s.shape[1] for s in seen]).cumsum(0)[:-1].tolist()
    steps = drafter.last_acceptance_stats.accepted
    assert seen[0].shape[1] == prompt.shape[1]
    assert [s.shape[1] for s in seen[1:]] == [a + 1 for a in steps[: len(seen) - 1]]
    assert starts[-1] + seen[-1].shape[1] == context.shape[1]


def test_vocab_is_large_enough_for_corruption():
    assert VOCAB > 4 and tiny_target("llama").config.vocab_size == VOCAB
