"""The budget's verdict on a drafter (schedule, drafter seconds, typical node values) outlives the process, beside
the step-cost curve: a new process's first call on a machine where the drafter cannot pay runs plain steps instead
of paying a drafter pass over its prompt to learn that again. The file cannot hurt: damaged, it is ignored with one
warning and decoding is plain greedy's."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from conftest import VOCAB, make_drafter, tiny_target

from hf_specdec import DecodingSettings
from hf_specdec.decoding import cost_cache, step_cost
from hf_specdec.decoding.budget import Budget, StepPlan, StepRecord
from hf_specdec.decoding.budget_memory import BudgetMemory, clean_verdict, memory_of
from hf_specdec.decoding.step_cost import GRID, SETTLED, StepCostModel
from hf_specdec.verification.tree import DraftTree

AUTO = DecodingSettings(budget="auto", tree_budget=6, prompt_lookup_tokens=0)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder of its own, curves loaded afresh from it, warnings not given yet in this process."""
    monkeypatch.setenv("HF_SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(step_cost, "_MODELS", {})
    monkeypatch.setattr(cost_cache, "_WARNED", set())
    return tmp_path


def new_process(monkeypatch):
    """What a new process sees: curves loaded afresh from the files, a drafter object of its own (same weights)."""
    monkeypatch.setattr(step_cost, "_MODELS", {})


def steep_verdict(target, drafter):
    """The memory of a drafter on a steep machine: every fed token costs a one-token step more, and the drafter's
    pass costs five of them; its drafts are typical of a good drafter."""
    memory = memory_of(drafter, target)
    for fed in GRID:
        for _ in range(SETTLED):
            memory.costs.record(fed, 0.010 * fed)
    memory.draft_seconds, memory.typical, memory.schedule = [0.050], [0.9, 0.8, 0.7, 0.5], {1: [3, 64]}
    assert memory.save() and memory.unsaved is None
    return memory


def test_a_new_process_starts_from_the_saved_verdict_and_runs_plain_where_drafting_cannot_pay(cache, monkeypatch):
    target = tiny_target("llama")
    prompt = torch.randint(3, VOCAB - 1, (1, 10), generator=torch.Generator().manual_seed(4))
    saved = steep_verdict(target, make_drafter(target, 4)).verdict()
    new_process(monkeypatch)
    drafter = make_drafter(target, 4)
    drafter.decoding = AUTO
    memory = memory_of(drafter, target)
    assert memory.verdict() == saved and memory.drafter_seconds == pytest.approx(0.050)
    plain = target.generate(prompt, do_sample=False, max_new_tokens=12)
    out = target.generate(prompt, do_sample=False, max_new_tokens=12, assistant_model=drafter)
    stats = drafter.last_acceptance_stats
    assert torch.equal(out, plain) and stats.plain_steps == stats.row_steps  # not one drafter pass

    other = tiny_target("llama", layers=2)  # another target: its own key, nothing to start from
    assert memory_of(make_drafter(other, 4), other).verdict() == {"schedule": {}, "draft_seconds": [], "typical": []}


def test_a_step_with_no_room_left_to_draft_is_no_drafter_timing(cache):
    """The last step of a call may have no room to draft: no drafter pass runs, and its microseconds must not stand
    for the drafter's cost (one such sample made a 0.45 s drafter look free, and drafting that loses looked as if
    it could pay)."""
    target = tiny_target("llama")
    memory = memory_of(make_drafter(target, 4), target)
    memory.draft_seconds = [0.4]
    empty = StepPlan(True, [DraftTree()], [DraftTree()])
    Budget(memory).learn(StepRecord(empty, [[]], 1, 0.2, 0.0003, 1))
    assert memory.draft_seconds == [0.4]


DAMAGED = {
    "not JSON": "{not json",
    "a list": "[1, 2]",
    "strings and out of range": json.dumps(
        {"{key}": {"schedule": {"1": ["a", 2], "x": [1, 1]}, "draft_seconds": [0.0], "typical": [1.5]}}
    ),
}


@pytest.mark.parametrize("kind", list(DAMAGED))
def test_a_damaged_verdict_file_is_ignored_with_one_warning(kind, cache, monkeypatch, caplog):
    target = tiny_target("llama")
    drafter = make_drafter(target, 4)
    key = f"{step_cost.model_key(target)}|drafter="
    key += memory_of(drafter, target).key.split("|drafter=", 1)[1]
    (cache / cost_cache.BUDGET_FILE).write_text(DAMAGED[kind].replace("{key}", key))
    new_process(monkeypatch)
    caplog.set_level(logging.WARNING)
    drafter = make_drafter(target, 4)
    drafter.decoding = AUTO
    prompt = torch.randint(3, VOCAB - 1, (1, 10), generator=torch.Generator().manual_seed(4))
    plain = target.generate(prompt, do_sample=False, max_new_tokens=8)
    assert torch.equal(target.generate(prompt, do_sample=False, max_new_tokens=8, assistant_model=drafter), plain)
    warnings = [r.getMessage() for r in caplog.records if "budget-memory cache" in r.getMessage()]
    assert len(warnings) == 1 and "measured afresh" in warnings[0]
    saved = json.loads((cache / cost_cache.BUDGET_FILE).read_text())  # the call's save wrote a sound entry
    assert clean_verdict(saved[drafter.budget_memory.key])[1] == []


@pytest.mark.parametrize(("per_token", "tried"), [(0.8, False), (0.01, True)])
def test_an_untimed_drafter_is_tried_only_where_a_drafter_always_right_could_pay(per_token, tried):
    """A first try reads the whole prompt through the drafter. Before the drafter was ever timed with this target,
    its pass is priced at the target's cost for a block times the drafter's share of the parameters: on a curve
    where 8 fed tokens cost 6.6 one-token steps (an AVX2 CPU in bf16) even drafts that are always kept lose, and
    the call runs plain steps; on a flat curve it tries. Once timed, the drafter's own seconds decide."""
    costs = StepCostModel("untimed")
    for fed in GRID:
        costs.record(fed, 0.2 * (1 + per_token * (fed - 1)))
    memory = BudgetMemory(costs, share=0.36, block=7)
    assert Budget(memory).plan(1, lambda: [DraftTree()]).drafted is tried
    memory = BudgetMemory(costs, share=0.36, block=7, draft_seconds=[0.001])
    assert Budget(memory).plan(1, lambda: [DraftTree()]).drafted
