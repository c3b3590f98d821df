"""The pieces that make base-LM chains cheaper (`sampled_base_weights="int8"`, `sampled_base_topk`): int8 weight-only
layers compute what their dequantized weights do, and the top-K draft q is the processed row's law over its top K
whenever those K hold the row's whole nucleus. The sampling tests (test_sampling_distribution.py) check that chains
drawn this way leave the output distribution the target's."""

from __future__ import annotations

import pytest
import torch
from conftest import MASK_ID, tiny_target
from transformers import (
    GenerationConfig,
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from hf_specdec import DecodingSettings, PardDrafter
from hf_specdec.models.int8_weights import Int8Linear, int8_available, int8_copy, pass_seconds, widest_faster
from hf_specdec.models.pard import modeling_pard
from hf_specdec.models.pard.generation_pard import PardCandidateGenerator
from hf_specdec.verification.processed import probabilities, process_rows, top_probabilities

pytestmark = pytest.mark.skipif(not int8_available("cpu"), reason="torch lacks the CPU int8 weight-only kernel")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_linear_computes_its_dequantized_weight_times_the_input(dtype):
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 40).to(dtype)
    q = Int8Linear(linear.weight, linear.bias)
    x = torch.randn(3, 5, 64, dtype=dtype)  # (B, T, K)
    want = x.float() @ q.dequantized().T + linear.bias.float()  # (B, T, N)
    got = q(x)
    assert got.shape == (3, 5, 40) and got.dtype == dtype
    tol = 1e-4 if dtype == torch.float32 else 0.05
    assert torch.allclose(got.float(), want, atol=tol, rtol=tol)
    # one scale per row: each row's largest weight is stored as +-127
    assert int(q.weight_int8.abs().amax(1).min()) == 127
    assert float((q.dequantized() - linear.weight.float()).abs().max()) <= float(q.scale.float().max()) / 2 + 1e-3


def test_int8_copy_replaces_every_linear_and_shares_the_rest():
    lm = tiny_target("llama", vocab=32, layers=2)
    quantized = int8_copy(lm)
    assert not any(isinstance(m, torch.nn.Linear) for m in quantized.modules())
    assert any(isinstance(m, torch.nn.Linear) for m in lm.modules())  # the original keeps its own layers
    assert quantized.get_input_embeddings().weight is lm.get_input_embeddings().weight
    ids = torch.tensor([[1, 5, 7, 3, 2]])
    with torch.no_grad():
        p, q = lm(ids).logits.softmax(-1), quantized(ids).logits.softmax(-1)  # (1, 5, V)
    assert float(0.5 * (p - q).abs().sum(-1).max()) < 0.05  # the same model, rounded


def _row(seed=0, V=50):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, V, generator=g) * 3  # (2, V) logits


def test_top_k_q_is_the_processed_row_when_k_covers_the_nucleus():
    logits = _row()
    procs = LogitsProcessorList([TemperatureLogitsWarper(0.7), TopKLogitsWarper(5), TopPLogitsWarper(0.9)])
    context = torch.tensor([[1, 2, 3]])
    whole = probabilities(process_rows(procs, logits, lambda r: context))  # (2, V)
    ids, q = top_probabilities(procs, logits, lambda r: context, k=8)  # (2, 8)
    assert ids.shape == q.shape == (2, 8)
    assert torch.allclose(torch.zeros_like(whole).scatter_(1, ids, q), whole, atol=1e-6)


def test_top_k_q_applies_history_processors_to_the_whole_row_first():
    """Repetition penalty reads token ids: it runs on the whole row, so the K kept are the penalised row's best."""
    logits = torch.zeros(1, 10)
    logits[0, 4], logits[0, 6] = 5.0, 4.0
    procs = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(100.0), TopPLogitsWarper(0.9)])
    ids, q = top_probabilities(procs, logits, lambda r: torch.tensor([[4]]), k=2)  # 4 was said: penalised
    assert int(ids[0, q[0].argmax()]) == 6
    assert float(q.sum()) == pytest.approx(1.0)


def test_top_k_q_renormalises_over_k_when_the_row_is_wider():
    logits = _row(1)
    ids, q = top_probabilities(LogitsProcessorList(), logits, lambda r: None, k=4)
    full = logits.softmax(-1)
    top = full.topk(4, -1)
    assert torch.equal(ids, top.indices)
    assert torch.allclose(q, top.values / top.values.sum(-1, keepdim=True), atol=1e-6)


def test_cheap_base_chain_settings_are_checked():
    assert DecodingSettings(sampled_base_topk=256, sampled_base_weights="int8").sampled_base_topk == 256
    with pytest.raises(ValueError, match="sampled_base_weights"):
        DecodingSettings(sampled_base_weights="int4")
    with pytest.raises(ValueError, match="sampled_base_topk"):
        DecodingSettings(sampled_base_topk=-1)
    with pytest.raises(TypeError, match="sampled_base_topk"):
        DecodingSettings(sampled_base_topk=2.5)


def _drafter_with_base_lm():
    target = tiny_target("llama")
    drafter = PardDrafter.from_causal_lm(tiny_target("llama", seed=7), target, mask_token_id=MASK_ID, block_size=4)
    drafter.attach_base_lm(tiny_target("llama", seed=7))
    drafter.decoding = DecodingSettings(budget="fixed", sampled_base_drafts=3, sampled_base_weights="auto")
    return drafter, target


def _generator(drafter, target):
    return PardCandidateGenerator(drafter, target, GenerationConfig(max_length=64, do_sample=True))


def test_pass_seconds_times_every_way_of_running_an_lm_at_any_width():
    lm = tiny_target("llama", vocab=32, layers=2)
    quantized = int8_copy(lm)
    ways = {"as_loaded": (lm.get_decoder(), lm.lm_head), "int8": (quantized.get_decoder(), quantized.lm_head)}
    for width in (1, 4):
        seconds = pass_seconds(ways, context=8, reps=3, width=width)
        assert set(seconds) == {"as_loaded", "int8"} and all(0 < s < 10 for s in seconds.values()), seconds


def test_int8_runs_the_passes_up_to_where_its_line_crosses_the_as_loaded_one():
    """Seconds as a 2-core AMD EPYC timed the 0.5B (one token 34 / 60 ms, 32 tokens 229 / 125 ms): int8 up to about
    7 tokens; never where it loses one token; every width where it wins at both."""
    widest = widest_faster({"int8": 0.034, "as_loaded": 0.060}, {"int8": 0.229, "as_loaded": 0.125}, 32)
    assert 6 < widest < 8
    assert widest_faster({"int8": 0.07, "as_loaded": 0.06}, {"int8": 0.1, "as_loaded": 0.2}, 32) == 0
    assert widest_faster({"int8": 0.03, "as_loaded": 0.06}, {"int8": 0.1, "as_loaded": 0.2}, 32) == float("inf")


def test_auto_weights_follow_the_timing_this_machine_gives():
    """Unpatched: the choice is the one the measured seconds say, and it is timed once per drafter."""
    drafter, target = _drafter_with_base_lm()
    first = _generator(drafter, target)
    seconds = drafter.base_weights_seconds
    int8_won = seconds["int8"] < seconds["as_loaded"]
    wide_keys = {"as_loaded@32", "int8@32"} if int8_won else set()  # wide passes only where int8 won one token
    assert set(seconds) == {"as_loaded", "int8"} | wide_keys and all(s > 0 for s in seconds.values())
    assert isinstance(first.base_chain.head, Int8Linear) == int8_won
    narrow = {way: seconds[way] for way in ("as_loaded", "int8")}
    wide = {way: seconds[f"{way}@32"] for way in ("as_loaded", "int8")} if int8_won else None
    assert first.base_chain.int8_widest == (widest_faster(narrow, wide, 32) if int8_won else 0)
    assert ("_int8_base" in drafter.__dict__) == int8_won  # the copies are kept only where they pay
    _generator(drafter, target)
    assert drafter.base_weights_seconds == seconds  # not timed again


def test_a_greedy_call_never_builds_nor_times_the_sampled_chains_base_lm():
    """Settings for sampled chains (`sampled_base_drafts`, "auto" weights) cost a greedy call nothing: no base chain,
    no int8 copies, no timing (on a 2-core AVX2 CPU that timing took 20 s in bf16 before the first greedy token), and
    the output is plain greedy's."""
    drafter, target = _drafter_with_base_lm()
    drafter.decoding = DecodingSettings(sampled_base_drafts=3, sampled_base_weights="auto")
    greedy = PardCandidateGenerator(drafter, target, GenerationConfig(max_length=64, do_sample=False))
    assert greedy.base_chain is None and greedy.base_drafts == 0
    prompt = torch.tensor([[1, 5, 9, 12, 7, 3, 8, 2]])
    out = target.generate(prompt, max_new_tokens=12, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, target.generate(prompt, max_new_tokens=12, do_sample=False))
    assert drafter.base_weights_seconds is None and "_int8_base" not in drafter.__dict__
    assert _generator(drafter, target).base_chain is not None  # a sampled call still drafts its chains


@pytest.mark.parametrize("winner", ["int8", "as_loaded"])
def test_auto_weights_run_base_chains_through_the_faster_way(monkeypatch, winner):
    """With the timer's answer fixed, chains run through int8 copies exactly when they timed faster; the losing
    copies are dropped. Either way a chain's q is what its drafts are drawn from (test_sampling_distribution.py
    checks both weights)."""
    calls = []

    def timed(ways, width=1, **kwargs):
        calls.append((sorted(ways), width))
        return {"int8": 1.0, "as_loaded": 2.0} if winner == "int8" else {"int8": 2.0, "as_loaded": 1.0}

    monkeypatch.setattr(modeling_pard, "pass_seconds", timed)
    drafter, target = _drafter_with_base_lm()
    for _ in range(2):
        chain = _generator(drafter, target).base_chain
        assert isinstance(chain.head, Int8Linear) == (winner == "int8")
        quantized = not any(isinstance(m, torch.nn.Linear) for m in chain.decoder.modules())
        assert quantized == (winner == "int8")
    wide = [(["as_loaded", "int8"], 32)] if winner == "int8" else []  # the wide width only where int8 won one token
    assert calls == [(["as_loaded", "int8"], 1), *wide]  # timed once, both ways
    assert ("_int8_base" in drafter.__dict__) == (winner == "int8")
    tree = _generator(drafter, target).sampled_tree(torch.tensor([[1, 5, 9, 12, 7]]), 3, 1, LogitsProcessorList())
    assert tree.q is not None and all(float(tree.q[d, tree.tokens[d]]) > 0 for d in range(len(tree)))


def test_a_chain_reads_the_prompt_as_loaded_and_drafts_through_int8(monkeypatch):
    """With int8 timed faster for one token and slower for 32 (crossing at 4 tokens here), a chain's first pass over
    a 6-token prompt runs the weights as loaded and each one-token pass after it the int8 copies."""

    def timed(ways, width=1, **kwargs):
        return {"int8": 1.0, "as_loaded": 2.0} if width == 1 else {"int8": 10.0, "as_loaded": 2.0}

    monkeypatch.setattr(modeling_pard, "pass_seconds", timed)
    drafter, target = _drafter_with_base_lm()
    chain = _generator(drafter, target).base_chain
    assert 3 < chain.int8_widest < 5
    chain.stop = 0.0  # every chain runs its 3 drafts: two one-token passes after the prompt's
    fed = []
    for name, decoder in (("int8", chain.decoder), ("as_loaded", chain.wide_decoder)):
        decoder.register_forward_hook(
            lambda m, args, kwargs, out, n=name: fed.append((n, kwargs["input_ids"].shape[1])), with_kwargs=True
        )
    chain.sampled_tree(torch.tensor([[1, 5, 9, 12, 7, 3]]), 3, 1, LogitsProcessorList())
    assert fed == [("as_loaded", 6), ("int8", 1), ("int8", 1)], fed


@pytest.mark.parametrize(("curve", "chains"), [("steep", False), ("flat", True)])
def test_chains_that_cannot_pay_on_this_machine_are_never_tried(monkeypatch, curve, chains):
    """Where even a chain whose every draft is kept commits too little per second (the measured verify curve of an
    AVX2 EPYC in bf16, a base-LM pass of 81 ms), sampled blocks never try or probe chains: plain steps only. On a
    flat curve chains stay a choice. The output is still sampled from the target (the choice is made before any
    draw; tests/test_sampling_distribution.py)."""
    from hf_specdec.decoding.budget_memory import memory_of
    from hf_specdec.models.pard.ar_choice import blocks_by_choice

    monkeypatch.setattr(modeling_pard, "pass_seconds", lambda ways, width=1, **kw: {"int8": 0.094, "as_loaded": 0.081})
    drafter, target = _drafter_with_base_lm()
    drafter.decoding = DecodingSettings(budget="auto", sampled_base_drafts=3, sampled_base_weights="auto")
    costs = memory_of(drafter, target).costs
    points = {"steep": {1: 0.20, 2: 0.37, 4: 0.66, 8: 1.30}, "flat": {1: 0.20, 2: 0.201, 4: 0.203, 8: 0.21}}
    costs.pin(points[curve])
    try:
        assert (_generator(drafter, target).ar_choice.options == ["base", "plain"]) == chains
        torch.manual_seed(0)
        prompt = torch.tensor([[1, 5, 9, 12, 7, 3, 8, 2]])
        out = target.generate(prompt, max_new_tokens=12, do_sample=True, assistant_model=drafter)
    finally:
        costs.reset()  # the curve is the process's: leave none pinned for other tests
    assert out.shape[1] == prompt.shape[1] + 12
    assert ("base" in blocks_by_choice(drafter)) == chains
