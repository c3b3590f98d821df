"""A drafted `generate()` behaves like a plain one: streamers, stopping criteria, min/max new tokens, EOS,
`return_dict_in_generate`; and the acceptance statistics it leaves on the drafter."""

from __future__ import annotations

import pytest
import torch
from conftest import make_drafter, oracle, tiny_target
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from hf_specdec import AcceptanceStats


class Recorder(BaseStreamer):
    def __init__(self):
        self.chunks, self.ended = [], 0

    def put(self, value):
        self.chunks.append(value.reshape(-1).tolist())

    def end(self):
        self.ended += 1


class StopAtLength(StoppingCriteria):
    def __init__(self, length):
        self.length = length

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.shape[0],), input_ids.shape[1] >= self.length, dtype=torch.bool)


class StopAfterToken(StoppingCriteria):
    def __init__(self, token):
        self.token = token

    def __call__(self, input_ids, scores, **kwargs):
        return input_ids[:, -1] == self.token


def test_streamer_receives_the_same_tokens_as_plain(target, prompt):
    plain_rec, spec_rec = Recorder(), Recorder()
    ref = target.generate(prompt, do_sample=False, max_new_tokens=30, streamer=plain_rec)
    drafter = oracle(target, prompt, 6, 3, 30)
    out = target.generate(prompt, do_sample=False, max_new_tokens=30, streamer=spec_rec, assistant_model=drafter)
    assert torch.equal(out, ref)
    flat = lambda chunks: [t for c in chunks for t in c]  # noqa: E731
    assert flat(spec_rec.chunks) == flat(plain_rec.chunks) == out[0].tolist()
    assert spec_rec.ended == plain_rec.ended == 1
    assert max(len(c) for c in spec_rec.chunks[1:]) == 4  # multi-token chunks: 3 accepted + bonus


@pytest.mark.parametrize("make_criterion", ["length", "token"])
def test_custom_stopping_criteria_stop_where_plain_stops(target, prompt, make_criterion):
    free = target.generate(prompt, do_sample=False, max_new_tokens=40, eos_token_id=None)
    if make_criterion == "length":
        criterion = StopAtLength(prompt.shape[1] + 9)
    else:
        criterion = StopAfterToken(int(free[0, prompt.shape[1] + 7]))
    ref = target.generate(
        prompt, do_sample=False, max_new_tokens=40, stopping_criteria=StoppingCriteriaList([criterion])
    )
    drafter = oracle(target, prompt, 8, None, 40)
    out = target.generate(
        prompt,
        do_sample=False,
        max_new_tokens=40,
        stopping_criteria=StoppingCriteriaList([criterion]),
        assistant_model=drafter,
    )
    assert torch.equal(out, ref)
    assert out.shape[1] < free.shape[1]


def test_min_new_tokens_suppresses_eos_as_in_plain(target, prompt):
    free = target.generate(prompt, do_sample=False, max_new_tokens=30, eos_token_id=None)
    eos = int(free[0, prompt.shape[1] + 2])  # plain greedy would stop at the third token
    ref = target.generate(prompt, do_sample=False, max_new_tokens=30, min_new_tokens=12, eos_token_id=eos)
    drafter = make_drafter(target, 8)
    out = target.generate(
        prompt, do_sample=False, max_new_tokens=30, min_new_tokens=12, eos_token_id=eos, assistant_model=drafter
    )
    assert torch.equal(out, ref)
    assert out.shape[1] - prompt.shape[1] >= 12


def test_return_dict_in_generate_matches_plain(target, prompt):
    kwargs = dict(do_sample=False, max_new_tokens=20, return_dict_in_generate=True, output_scores=True)
    ref = target.generate(prompt, **kwargs)
    drafter = oracle(target, prompt, 4, 2, 20)
    out = target.generate(prompt, assistant_model=drafter, **kwargs)
    assert type(out) is type(ref)
    assert torch.equal(out.sequences, ref.sequences)
    assert len(out.scores) == len(ref.scores) == 20
    for a, b in zip(out.scores, ref.scores, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_acceptance_stats_after_a_call(prompt):
    target = tiny_target("llama")
    drafter = oracle(target, prompt, 5, 2, 33, eos_token_id=None)
    target.generate(prompt, do_sample=False, max_new_tokens=33, eos_token_id=None, assistant_model=drafter)
    stats = drafter.last_acceptance_stats
    assert isinstance(stats, AcceptanceStats)
    assert stats.prefill_forwards == 1
    # 32 tokens after the prefill's first: ten forwards commit 2 + bonus, the last one 1 + bonus
    assert stats.accepted == [2] * 10 + [1]
    assert stats.drafted == [4] * 10 + [1]  # the last block is capped by max_length
    assert stats.committed_tokens == 32
    assert stats.tau == pytest.approx(32 / 11)
    assert stats.histogram == [0, 1, 10, 0, 0]
    assert stats.acceptance_rate == pytest.approx(21 / 41)
    assert stats.to_dict()["tau"] == pytest.approx(32 / 11)
    # a second call replaces the statistics
    target.generate(prompt, do_sample=False, max_new_tokens=5, eos_token_id=None, assistant_model=drafter)
    assert drafter.last_acceptance_stats.committed_tokens == 4


def test_sampling_with_a_drafter_runs_and_respects_lengths(target, prompt):
    drafter = oracle(target, prompt, 4, None, 25)
    torch.manual_seed(0)
    out = target.generate(prompt, do_sample=True, temperature=0.8, top_k=20, max_new_tokens=25, assistant_model=drafter)
    assert out.shape[1] <= prompt.shape[1] + 25
    assert drafter.last_acceptance_stats.verify_forwards > 0
