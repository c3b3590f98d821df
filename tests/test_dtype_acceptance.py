"""A drafter that agrees with the target is accepted in every dtype, on every path: tau is asserted, not only
identity (an fp32 target once reported tau 1.00 with output still identical, which no identity test sees).

The drafter is a PARD drafter whose LM is the target itself, in the target's dtype: its first draft at every step is
the target's own next token, so every drafted row step accepts at least one draft."""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, tiny_target
from test_pard import pard

import hf_specdec
from hf_specdec import DecodingSettings

PATHS = {
    "chain in transformers' loop": DecodingSettings(budget="fixed"),
    "tree in hf_specdec's step": DecodingSettings(budget="fixed", tree_budget=6, tree_topk=2),
    "adaptive budget, pinned flat curve": DecodingSettings(),
}


def agreeing_drafter(dtype: torch.dtype, settings: DecodingSettings):
    target = tiny_target("llama").to(dtype)
    twin = tiny_target("llama").to(dtype)  # same seed: the target's weights
    drafter = pard(target, block_size=4, lm=twin)
    drafter.decoding = settings
    return target, drafter


def drafted_steps_accept(stats) -> bool:
    """Every row step that verified drafts accepted one or more, and at most one step per row verified none (the
    last, when no room was left to draft before max_new_tokens)."""
    accepted = all(a >= 1 for a, d in zip(stats.accepted, stats.drafted, strict=True) if d)
    return accepted and stats.plain_steps <= 2


def assert_greedy_up_to_rounding(target, out: torch.Tensor, plain: torch.Tensor, scores: tuple) -> None:
    """bf16: a multi-token verify rounds otherwise than one-token decoding, by more on some CPUs (on an AVX2 EPYC a
    one-pass read of a sequence moved its logits by 0.14 against one-token decoding). So the output must be the
    target's greedy choice up to that rounding, measured on this machine: where it leaves plain decoding, plain's
    own top two were within the rounding; and every token it emits is, given its own prefix, within the rounding
    of the target's top logit."""
    n = plain.shape[1] - len(scores)  # prompt length
    stepwise = torch.stack([s[0].float() for s in scores])  # [new, vocab]
    with torch.no_grad():
        one_pass = target(plain).logits[0, n - 1 : -1].float()  # [new, vocab]
        own = target(out).logits[0, n - 1 : -1].float()  # [new, vocab]
    rounding = (one_pass - stepwise).abs().max().item()
    differ = (out[0, n:] != plain[0, n:]).nonzero()
    if len(differ):
        k = differ[0].item()
        step = stepwise[k]
        assert step[plain[0, n + k]] - step[out[0, n + k]] <= rounding, f"left plain decoding at new token {k}"
    chosen = own.gather(1, out[0, n:, None])[:, 0]  # [new]
    assert (own.max(1).values - chosen).max().item() <= rounding


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("path", list(PATHS))
def test_an_agreeing_drafter_is_accepted_in_every_dtype(dtype, path):
    target, drafter = agreeing_drafter(dtype, PATHS[path])
    prompt = torch.randint(3, VOCAB - 1, (1, 10), generator=torch.Generator().manual_seed(3))
    run = target.generate(prompt, max_new_tokens=24, do_sample=False, output_scores=True, return_dict_in_generate=True)
    plain = run.sequences
    costs = hf_specdec.cost_model(target)
    if path.startswith("adaptive"):  # a flat cost curve: drafting always pays, so every step drafts
        costs.pin({n: 1.0 for n in (1, 2, 4, 8, 16, 32)})
    try:
        out = target.generate(prompt, max_new_tokens=24, do_sample=False, assistant_model=drafter)
    finally:
        costs.reset()  # the curve is the process's: leave none pinned for other tests
    stats = drafter.last_acceptance_stats
    if dtype == torch.float32:
        assert torch.equal(out, plain)
    else:
        assert_greedy_up_to_rounding(target, out, plain, run.scores)
    assert drafted_steps_accept(stats) and stats.plain_steps <= 1
    assert stats.drafted_tau >= 2.0 and stats.tau >= 1.9


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_an_agreeing_drafter_is_accepted_in_batches_and_the_server(dtype):
    target, drafter = agreeing_drafter(dtype, DecodingSettings(budget="fixed", tree_budget=4))
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, VOCAB - 1, (n,), generator=g) for n in (7, 11)]
    width = max(len(p) for p in prompts)
    ids = torch.zeros(2, width, dtype=torch.long)
    mask = torch.zeros(2, width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :], mask[i, width - len(p) :] = p, 1
    plain = target.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False)
    out = target.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False, assistant_model=drafter)
    if dtype == torch.float32:  # bf16: a batched multi-token verify rounds otherwise than one-token decoding
        assert torch.equal(out, plain)
    stats = drafter.last_acceptance_stats
    assert drafted_steps_accept(stats) and stats.drafted_tau >= 2.0
    server = hf_specdec.SpeculativeServer(target, drafter, max_batch_size=2, do_sample=False)
    requests = [server.submit(p, 16) for p in prompts]
    server.run()
    for request, p in zip(requests, prompts, strict=True):
        if dtype == torch.float32:
            assert torch.equal(request.output_ids, target.generate(p[None], max_new_tokens=16, do_sample=False)[0])
        assert drafted_steps_accept(request.stats) and request.stats.drafted_tau >= 2.0


def test_plain_steps_are_counted_apart_from_drafted_ones():
    """When the budget runs plain steps (drafting does not pay: a steep cost curve), tau over all row steps falls
    towards 1 while the drafter's own acceptance, over drafted steps, is what it is."""
    stats = hf_specdec.AcceptanceStats(block_size=4)
    for drafted, accepted in ((3, 2), (0, 0), (0, 0), (3, 3)):
        stats.record(drafted, accepted)
    assert stats.plain_steps == 2 and stats.tau == 9 / 4 and stats.drafted_tau == 7 / 2
