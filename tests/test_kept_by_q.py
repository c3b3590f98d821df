"""The memory that ends base-LM chains with `sampled_base_stop_on="kept"` (`models/pard/kept_by_q.py`): each bucket of
q starts at its middle q, counts every verified draft up to the first rejection, fades past MOST drafts, and is kept
per way of processing scores; a real `generate` call counts exactly the drafts its verified chains had judged."""

from __future__ import annotations

import copy
from bisect import bisect_right

import pytest
import torch
from conftest import MASK_ID, tiny_target
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

from hf_specdec import DecodingSettings, PardDrafter
from hf_specdec.models.pard.kept_by_q import EDGES, MOST, PRIOR, KeptByQ, kept_of, processing_key


def judged(memory: KeptByQ) -> tuple[float, float]:
    """(drafts kept, drafts judged) the memory counted beyond its prior."""
    fresh = KeptByQ()
    return sum(memory.kept) - sum(fresh.kept), sum(memory.seen) - sum(fresh.seen)


def test_a_new_memory_reads_each_bucket_at_its_middle_q():
    memory = KeptByQ()
    assert len(memory.seen) == len(EDGES) + 1 and all(s == PRIOR for s in memory.seen)
    assert memory.chance(0.01) == pytest.approx(0.025)
    assert memory.chance(0.45) == pytest.approx(0.45)
    assert memory.chance(0.97) == pytest.approx(0.975)
    assert memory.chance(0.05) == pytest.approx(0.075)  # an edge opens the bucket above it


def test_drafts_are_counted_up_to_the_first_rejection():
    memory = KeptByQ()
    memory.learn([0.97, 0.97, 0.3, 0.97, 0.02], accepted=2)  # kept two, rejected the third, the rest never judged
    top, mid, low = bisect_right(EDGES, 0.97), bisect_right(EDGES, 0.3), bisect_right(EDGES, 0.02)
    assert memory.seen[top] == PRIOR + 2 and memory.kept[top] == pytest.approx(PRIOR * 0.975 + 2)
    assert memory.seen[mid] == PRIOR + 1 and memory.kept[mid] == pytest.approx(PRIOR * 0.35)
    assert memory.seen[low] == PRIOR  # after the rejection
    memory.learn([0.3, 0.3], accepted=2)  # a chain kept whole: every draft counted kept
    assert memory.seen[mid] == PRIOR + 3 and memory.kept[mid] == pytest.approx(PRIOR * 0.35 + 2)
    with pytest.raises(ValueError, match="cannot have 3 kept"):
        memory.learn([0.5, 0.5], accepted=3)


def test_a_full_bucket_fades_toward_what_it_realizes():
    memory = KeptByQ()
    for _ in range(2000):
        memory.learn([0.02], accepted=1)  # low-q drafts the target always keeps
    i = bisect_right(EDGES, 0.02)
    assert memory.seen[i] <= MOST + 1
    assert memory.chance(0.02) > 0.99
    for _ in range(2000):
        memory.learn([0.02], accepted=0)  # then never: the old verdicts fade
    assert memory.chance(0.02) < 0.01


def test_memories_are_kept_per_way_of_processing_scores():
    drafter = PardDrafter.from_causal_lm(tiny_target("llama", seed=7), tiny_target("llama"), mask_token_id=MASK_ID)
    t1, t07 = LogitsProcessorList([TemperatureLogitsWarper(1.0)]), LogitsProcessorList([TemperatureLogitsWarper(0.7)])
    nucleus = LogitsProcessorList([TemperatureLogitsWarper(0.7), TopPLogitsWarper(0.9)])
    keys = {processing_key(p) for p in (t1, t07, nucleus, None)}
    assert len(keys) == 4
    assert kept_of(drafter, t1) is kept_of(drafter, LogitsProcessorList([TemperatureLogitsWarper(1.0)]))
    assert kept_of(drafter, t1) is not kept_of(drafter, t07)


def test_generate_counts_the_drafts_its_verified_chains_had_judged():
    """Every step a base-LM chain (budget "fixed", no lookup branch): the memory counts, for each drafted step but the
    last (its verdict comes after the call), its accepted drafts as kept and the one after them as judged, and it
    carries to the next call. The base LM is the target with a perturbed head: drafts both kept and rejected."""
    target = tiny_target("llama")
    base = copy.deepcopy(target)
    with torch.no_grad():
        base.lm_head.weight.add_(0.5 * torch.randn_like(base.lm_head.weight))
    drafter = PardDrafter.from_causal_lm(tiny_target("llama", seed=7), target, mask_token_id=MASK_ID, block_size=4)
    drafter.attach_base_lm(base)
    drafter.decoding = DecodingSettings(
        budget="fixed", sampled_base_drafts=6, sampled_base_stop=0.3, sampled_base_stop_on="kept"
    )
    drafter.eval()
    prompt = torch.tensor([[1, 5, 9, 12, 7, 3, 8, 2]])
    torch.manual_seed(0)
    expected_kept = expected_judged = 0
    for _ in range(2):
        target.generate(prompt, assistant_model=drafter, do_sample=True, max_new_tokens=32)
        stats = drafter.last_acceptance_stats
        steps = [(a, d) for a, d in zip(stats.accepted, stats.drafted, strict=True) if d]
        assert len(steps) >= len(stats.accepted) - 1  # every step but one that reached the length verified a chain
        expected_kept += sum(a for a, _ in steps[:-1])
        expected_judged += sum(min(a + 1, d) for a, d in steps[:-1])
    (memory,) = drafter._kept_by_q.values()
    kept, seen = judged(memory)
    assert kept == pytest.approx(expected_kept) and seen == pytest.approx(expected_judged)
    assert expected_kept > 0 and expected_judged > expected_kept  # drafts both kept and rejected
