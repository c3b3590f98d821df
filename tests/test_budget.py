"""The adaptive budget: the step-cost model, the acceptance model, the memory that keeps them with the drafter, the
plans they drive, and that output is unchanged.

Curves are written into the real `StepCostModel` of the tiny target (what a machine would have measured), so a test
can put decoding on a machine where verifying is free (drafting pays) or dear (no draft pays: plain steps). The
budget is driven as the step drives it: `plan = budget.plan(rows, draft)`, then `budget.learn(StepRecord(...))`.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import VOCAB, assert_batch_and_server_equal_plain, make_drafter, oracle, tiny_target

import hf_specdec
from hf_specdec import DecodingSettings
from hf_specdec.decoding.acceptance_model import AcceptanceModel
from hf_specdec.decoding.budget import Budget, StepPlan, StepRecord, keep_best
from hf_specdec.decoding.budget_memory import BudgetMemory
from hf_specdec.decoding.step_cost import GRID, SETTLED, StepCostModel, cost_model
from hf_specdec.verification.tree import DraftTree, best_first_tree

NEW_TOKENS = 29
AUTO = DecodingSettings(budget="auto", tree_budget=6, prompt_lookup_tokens=3)


PINNED = []  # targets given a curve by `machine`: unpinned after each test, so other tests measure for real


@pytest.fixture(autouse=True)
def unpin_curves():
    yield
    while PINNED:
        cost_model(PINNED.pop()).reset()


def machine(target, per_token: float) -> None:
    """Give `target` a curve: a row of one token costs 10 ms, each further fed token `per_token` of that."""
    model = cost_model(target)
    model.reset()
    PINNED.append(target)
    for rows in range(1, 5):  # pinned: real timings of the tiny model do not move it
        model.pin({fed: 0.010 * rows * (1 + per_token * (fed - 1)) for fed in range(1, 200)}, rows)


def always_accepted(tree) -> AcceptanceModel:
    """An acceptance model that has seen `tree`'s top chain (nodes 0..6) accepted at every one of 40 steps."""
    model = AcceptanceModel()
    for _ in range(40):
        model.record(tree, tree.path_to(6))
    return model


def no_drafts(rows: int):
    """A drafter with no room left: an empty tree per row (the `draft` argument of `Budget.plan`)."""
    return lambda: [DraftTree() for _ in range(rows)]


def drafted(tree, rows: int = 1) -> StepPlan:
    """The plan of a drafted step that verified `tree` whole in each of `rows` rows."""
    return StepPlan(True, [tree] * rows, [tree] * rows)


def step(plan: StepPlan, committed: int, seconds: float, verify: float = 0.010, caught_up: bool = False) -> StepRecord:
    """What a step of `plan` did: `committed` tokens in `seconds` (drafter included), `verify` of them the target's
    forward (tests put it on their curve, so the curve is unchanged); acceptance is not what these tests look at, so
    no path is recorded."""
    fed = 1 + max((len(t) for t in plan.trees), default=0)
    rows = len(plan.trees)
    return StepRecord(plan, [None] * rows, fed, verify, seconds - verify, committed, caught_up)


def test_cost_model_interpolates_extrapolates_and_is_saved_per_target(tmp_path, monkeypatch):
    model = StepCostModel("k")
    assert model.cost(4) is None and "nothing measured" in str(model)
    for fed, seconds in ((1, 0.1), (1, 0.3), (1, 0.2), (5, 0.6)):
        model.record(fed, seconds)  # one row
    assert model.cost(1) == pytest.approx(0.2)  # median of the samples
    assert model.cost(3) == pytest.approx(0.4)  # linear between measured points
    assert model.cost(9) == pytest.approx(1.0)  # the last slope beyond them
    monkeypatch.setenv("HF_SPECDEC_CACHE", str(tmp_path))
    target = tiny_target("llama")
    saved = cost_model(target)
    saved.reset()
    saved.record(3, 0.5)
    saved.save()
    stored = json.loads((tmp_path / "step_costs.json").read_text())
    assert stored[saved.key] == {"1": {"3": [0.5]}} and "cpu" in saved.key and "threads=" in saved.key
    saved.record(1, 0.9, rows=8)  # eight rows of one token: their own curve, never guessed from one row's
    assert saved.cost(1, rows=8) == pytest.approx(0.9) and saved.cost(8) == pytest.approx(0.5)
    assert saved.cost(1, rows=4) is None
    assert "fed tokens" in str(hf_specdec.cost_model(target)) and hf_specdec.cost_model(target) is saved
    saved.reset()
    assert json.loads((tmp_path / "step_costs.json").read_text())[saved.key] == {}


def test_acceptance_model_calibrates_the_drafters_confidence_per_depth():
    tree = best_first_tree([[-0.1, -2.5], [-0.2, -3.0]], [[5, 6], [7, 8]], 4)  # q ~ 0.9, 0.08 per depth
    model = AcceptanceModel()
    for _ in range(60):
        model.record(tree, [0])  # depth 1's top node always accepted, depth 2 never
    values = model.node_values(tree)
    first = tree.tokens.index(5)
    assert values[first] > 0.9 and max(v for i, v in enumerate(values) if tree.parents[i] == first) < 0.1
    assert model.calibration(2) < 0.1 < model.calibration(1)


def test_budget_verifies_everything_where_it_is_free_and_nothing_where_it_is_dear():
    tree = best_first_tree([[-0.01] * 2] * 7, [[5, 6]] * 7, 10)
    sure = always_accepted(tree)  # the drafter's top chain is always accepted
    cheap, dear = StepCostModel("cheap"), StepCostModel("dear")
    for fed in range(1, 80):
        cheap.record(fed, 0.010)
        dear.record(fed, 0.010 * fed)
    budget = Budget(BudgetMemory(cheap, sure), draft_seconds=0.001)
    assert len(budget.plan(1, lambda: [tree]).trees[0]) == len(tree)
    wrong = AcceptanceModel()
    for _ in range(40):
        wrong.record(tree, [])  # the drafter is sure of itself and always wrong: its calibration drops
    memory = BudgetMemory(dear, wrong)
    budget = Budget(memory, draft_seconds=0.001)
    plan = budget.plan(1, lambda: [tree])
    assert plan.drafted and len(plan.trees[0]) == 0
    budget.learn(step(plan, 1, 0.011))
    left = memory.schedule[1][0]
    plans = [budget.plan(1, lambda: [tree]) for _ in range(left + 1)]
    assert left >= 1 and [p.drafted for p in plans] == [False] * left + [True]  # then a probe
    budget.learn(step(plans[-1], 1, 0.011))
    assert memory.schedule[1][0] > left  # a probe that confirms it: plain for longer
    assert Budget(memory).plan(1, lambda: [tree]).drafted is False  # kept with the drafter: the next call starts plain
    assert len(keep_best(tree, 3, sure.node_values(tree))) == 3


def test_budget_measures_unmeasured_sizes_first_in_real_steps():
    tree = best_first_tree([[-0.01] * 2] * 7, [[5, 6]] * 7, 10)
    costs = StepCostModel("new")
    empty = Budget(BudgetMemory(costs))
    assert empty.plan(1, lambda: [tree]).drafted is False  # the one-token cost first, by a plain step: no drafter pass
    costs.record(1, 0.01)  # 2 fed tokens are now close enough to interpolate: 4 is measured next
    plan = empty.plan(1, lambda: [tree])
    assert plan.drafted and GRID[1:3] == (2, 4) and len(plan.trees[0]) == GRID[2] - 1
    assert plan.measuring  # a measuring step: never judged (its size was not chosen to pay)
    empty.learn(step(plan, 0, 1.0, caught_up=True))
    assert empty.realized == {} and empty.plan(1, lambda: [tree]).drafted


def test_noisy_costs_are_made_monotone_and_near_ties_go_to_the_larger_size():
    from hf_specdec.decoding.step_cost import monotone

    assert monotone({1: 0.20, 9: 0.30, 17: 0.26, 33: 0.40}) == pytest.approx({1: 0.20, 9: 0.28, 17: 0.28, 33: 0.40})
    tree = best_first_tree([[-0.01] * 2] * 7, [[5, 6]] * 7, 10)
    sure = always_accepted(tree)
    flat = StepCostModel("flat-noisy")
    for fed, ms in {1: 200, 2: 200, 3: 201, 5: 203, 9: 290, 17: 260, 33: 300}.items():
        for _ in range(SETTLED):
            flat.record(fed, ms / 1000)  # 9 tokens timed dearer than 17: noise, not the machine
    assert flat.cost(9) == pytest.approx(flat.cost(17)) == pytest.approx(0.275)
    budget = Budget(BudgetMemory(flat, sure), draft_seconds=0.05)
    assert len(budget.plan(1, lambda: [tree]).trees[0]) == len(tree)  # the whole tree: dearer by noise only


def test_one_slow_drafted_step_does_not_stop_a_drafting_that_pays():
    """A drafter that catches up on a long prompt (or on plain steps) makes one step slow; the recent steps' tokens
    over their seconds judge, so drafting that pays goes on; three slow steps out of five stop it."""
    tree = best_first_tree([[-0.01] * 2] * 7, [[5, 6]] * 7, 10)
    hopeful = always_accepted(tree)
    flat = StepCostModel("flat-catch-up")
    for fed in range(1, 80):
        flat.record(fed, 0.010)
    memory = BudgetMemory(flat, hopeful)
    budget = Budget(memory)
    # plain steps commit 100 tokens/s; these 208 together; in the first, the drafter read the whole prompt first
    for committed, seconds, caught_up in ((5, 0.05, True), (5, 0.011, False), (5, 0.011, False)):
        budget.learn(step(drafted(tree), committed, seconds, caught_up=caught_up))
        assert budget.plan(1, lambda: [tree]).drafted
    assert memory.drafter_seconds == pytest.approx(0.001)  # the catch-up is not a sample of the drafter's cost
    for _ in range(3):
        budget.learn(step(drafted(tree), 2, 0.1))  # 20 tokens/s
    assert not budget.plan(1, lambda: [tree]).drafted


def test_drafting_that_breaks_even_per_step_loses_to_its_catch_ups():
    """In a server every joining request costs the drafter a pass over its prompt: three steps that commit 10% more
    per second than plain steps keep drafting, but with a fourth that first caught up (twice the time) the four
    commit less per second than plain steps (their median step would have kept drafting), so plain steps follow."""
    tree = best_first_tree([[-0.01] * 2] * 7, [[5, 6]] * 7, 10)
    flat = StepCostModel("flat-joins")
    for fed in range(1, 80):
        flat.record(fed, 0.010, rows=4)  # plain steps: 4 rows in 10 ms, 400 tokens/s
    budget = Budget(BudgetMemory(flat, always_accepted(tree)), draft_seconds=0.001)
    for _ in range(3):
        assert budget.plan(4, lambda: [tree] * 4).drafted
        budget.learn(step(drafted(tree, 4), 44, 0.1))  # 440 tokens/s
    assert budget.plan(4, lambda: [tree] * 4).drafted
    budget.learn(step(drafted(tree, 4), 44, 0.2, caught_up=True))  # a catch-up: 176 tokens in 0.5 s together
    assert not budget.plan(4, lambda: [tree] * 4).drafted


@pytest.mark.parametrize("per_token", [0.0, 1.0], ids=["free", "dear"])
@pytest.mark.parametrize("accept", ["none", "all", "j"])
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_adaptive_greedy_output_is_plain_greedy(arch, accept, per_token):
    target = tiny_target(arch)
    prompt = torch.randint(3, VOCAB - 1, (1, 12), generator=torch.Generator().manual_seed(5))
    machine(target, per_token)
    drafter = oracle(target, prompt, 4, {"none": 0, "all": None, "j": 2}[accept], NEW_TOKENS, eos_token_id=None)
    drafter.decoding = AUTO
    ref = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=None)
    out = target.generate(
        prompt, do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=None, assistant_model=drafter
    )
    assert torch.equal(out, ref)
    drafted = drafter.last_acceptance_stats.drafted
    if per_token == 1.0:  # verifying n tokens costs n steps: no draft pays, plain steps (nothing drafted) follow
        assert drafted.count(0) >= len(drafted) // 2
    elif accept == "all":  # verifying is free and the drafter is always right: it drafts every step
        assert min(drafted[:-2]) > 0 and drafter.last_acceptance_stats.tau > 2


@pytest.mark.parametrize("per_token", [0.0, 1.0], ids=["free", "dear"])
def test_adaptive_batch_and_server_output_is_plain_greedy(per_token):
    target = tiny_target("llama")
    machine(target, per_token)
    g = torch.Generator().manual_seed(8)
    prompts = [torch.randint(3, VOCAB - 1, (n,), generator=g) for n in (9, 5, 12)]
    drafter = oracle(target, prompts[0][None], 4, None, NEW_TOKENS)
    drafter.decoding = AUTO
    assert_batch_and_server_equal_plain(target, drafter, prompts, 11)


def test_decisions_on_the_issue_curves_follow_the_hardware():
    from budget_decisions import decision

    xeon_bf16 = {1: 392, 2: 505, 4: 1144, 8: 1464, 16: 2082, 32: 3439}  # 8 tokens cost 3.7x one
    flat = {1: 200, 2: 200, 4: 205, 8: 210, 16: 220, 32: 260}  # a GPU-like curve
    weak, strong = [0.13] + [0.1] * 6, [0.8] * 7
    assert decision(xeon_bf16, weak, draft_ms=30)["plain_steps"]  # nothing pays: plain one-token steps
    assert decision(xeon_bf16, strong, draft_ms=30)["drafts"] == 1  # a strong drafter: one draft a step
    assert decision(flat, strong, draft_ms=30)["drafts"] >= 5  # verifying is nearly free: (nearly) the whole block
    assert decision(flat, strong, draft_ms=30)["expected_speedup"] > 2.5


def test_drafting_that_really_commits_less_per_second_than_plain_backs_off():
    """The models may be too hopeful (a flat curve, a confident drafter); what drafted steps really achieved decides
    too: here they commit 20 tokens/s against plain steps' 100 (10 ms per row), so plain steps follow."""
    tree = best_first_tree([[-0.01] * 2] * 7, [[5, 6]] * 7, 10)
    hopeful = always_accepted(tree)
    flat = StepCostModel("flat")
    for fed in range(1, 80):
        flat.record(fed, 0.010)
    budget = Budget(BudgetMemory(flat, hopeful), draft_seconds=0.001)
    budget.learn(step(drafted(tree), 5, 0.01))  # really fast: keeps drafting
    assert budget.plan(1, lambda: [tree]).drafted
    for _ in range(3):
        budget.learn(step(drafted(tree), 1, 0.05))
    assert not budget.plan(1, lambda: [tree]).drafted


def test_a_budget_without_plain_steps_keeps_drafting_and_marks_trees_cut_to_measure():
    """Where the drafter chooses plain steps itself (sampled PARD blocks, `Budget.plain_steps` off), drafted steps
    that commit far less than plain steps do not send the call to plain steps; a tree the budget cuts to a size it
    measures is marked so (`DraftTree.measuring`) for the drafter's own judgement."""
    tree = best_first_tree([[-0.01] * 2] * 7, [[5, 6]] * 7, 10)
    flat = StepCostModel("flat")
    for fed in range(1, 80):
        flat.record(fed, 0.010)
    budget = Budget(BudgetMemory(flat, always_accepted(tree)), draft_seconds=0.001, plain_steps=False)
    for _ in range(6):
        plan = budget.plan(1, lambda: [tree])
        assert plan.drafted and not tree.measuring
        budget.learn(step(plan, 1, 0.05))  # 20 tokens/s against plain steps' 100
    assert budget.plan(1, lambda: [tree]).drafted
    fresh = Budget(BudgetMemory(StepCostModel("fresh"), AcceptanceModel()), plain_steps=False)
    assert not fresh.plan(1, lambda: [tree]).drafted  # the one-token cost is measured first, by a plain step
    fresh.memory.costs.record(1, 0.010)
    cut = fresh.plan(1, lambda: [tree])
    assert cut.measuring and len(cut.trees[0]) < len(tree) and tree.measuring


def test_a_budget_that_does_not_cut_verifies_each_drafted_tree_whole():
    """Where the drafter also chose each block's length and paid its passes (sampled base-LM chains, `Budget.cuts`
    off), every drafted tree is verified whole, none cut to a size the budget measures, however little its nodes
    are worth; a fresh memory still measures the one-token cost first, with a plain step."""
    tree = best_first_tree([[-3.0] * 2] * 7, [[5, 6]] * 7, 10)  # nodes the acceptance model values low
    fresh = Budget(BudgetMemory(StepCostModel("fresh"), AcceptanceModel()), plain_steps=False, cuts=False)
    assert not fresh.plan(1, lambda: [tree]).drafted
    fresh.memory.costs.record(1, 0.010)
    for _ in range(4):
        whole = fresh.plan(1, lambda: [tree])
        assert whole.drafted and whole.trees[0] is tree and not whole.measuring and not tree.measuring
        fresh.learn(step(whole, 1, 0.5))  # 2 tokens/s against plain steps' 100: the drafter's choice decides


def test_a_budget_that_does_not_cut_verifies_a_lookup_branch_only_as_far_as_it_pays():
    """With `cuts` off the drafter's own nodes stay whole, but the prompt-lookup branch beside them (no drafter pass,
    only verified width) is kept only as far as it pays on the measured curve. On the curve of a 2-core AVX2 EPYC in
    bf16 (each fed token about 0.85x of a one-token step) a fresh branch of 10 goes, from beside a chain and from a
    "plain" choice's tree, which becomes a plain one-token step (it was an 11-token verify committing one token); on
    the 2-core Xeon's flat curve a copy going on is kept whole."""
    steep, flat = StepCostModel("avx2"), StepCostModel("xeon")
    steep.pin({1: 0.20, 2: 0.37, 4: 0.66, 8: 1.30, 16: 2.50})
    flat.pin({1: 0.285, 8: 0.296, 9: 0.334, 14: 0.338, 15: 0.383, 19: 0.383})
    copying = AcceptanceModel()
    seen = DraftTree()
    seen.add_chain(list(range(10, 20)), merge=False)
    seen.copying = True
    for _ in range(3):  # three steps, each copying its whole branch of 10
        copying.record(seen, list(range(10)))

    def trees():
        chain = best_first_tree([[-0.05, -3.0]] * 7, [[5, 6]] * 7, 7)  # the drafter's nodes
        alone = DraftTree()  # a "plain" choice: no drafter nodes
        for tree in (chain, alone):
            tree.add_chain(list(range(30, 40)), merge=False)
        return [chain, alone]

    fresh = Budget(BudgetMemory(steep, AcceptanceModel()), plain_steps=False, cuts=False)
    planned = [fresh.plan(1, lambda t=t: [t]).trees[0] for t in trees()]
    assert planned[0].lookup == [False] * 7 and planned[0].tokens == trees()[0].tokens[:7]  # the chain, whole
    assert len(planned[1]) == 0  # a plain one-token step
    on_flat = Budget(BudgetMemory(flat, copying), plain_steps=False, cuts=False)
    for tree in trees():
        tree.copying = True
        assert sum(on_flat.plan(1, lambda t=tree: [t]).trees[0].lookup) == 10


def test_a_new_load_borrows_a_close_row_count_curve_and_plain_verdict():
    costs = StepCostModel("load")
    for fed in GRID:
        costs.record(fed, 0.1 * fed, rows=8)
    assert costs.measured(2, rows=7) and costs.cost(2, rows=7) == pytest.approx(0.2 * 7 / 8)
    assert not costs.measured(2, rows=4) and costs.cost(2, rows=4) is None  # too far: measured afresh
    costs.record(1, 0.05, rows=7)
    assert costs.cost(1, rows=7) == pytest.approx(0.05) and costs.cost(3, rows=7) == pytest.approx(0.3 * 7 / 8)
    budget = Budget(BudgetMemory(costs, schedule={6: [0, 16]}))  # 6 rows: plain mode after failed probes
    assert not budget.plan(8, no_drafts(8)).drafted  # a heavier load (up to 2x): starts plain too
    assert not budget.plan(5, no_drafts(5)).drafted  # a lighter one may pay: a plain step measures its one-token cost
    costs.record(1, 0.04, rows=5)
    assert budget.plan(5, no_drafts(5)).drafted  # ... then it probes for itself


def test_a_due_probe_is_skipped_where_the_models_say_drafting_cannot_pay():
    """A heavy load in plain mode: the drafter's measured seconds per row (a drafter pass per row) make any draft
    lose by far, so the probe is skipped (no drafter pass catches up on every row's prompt to confirm it); with a
    cheap drafter the probe runs. The 16-row verify cost is estimated from the 4-row curve's rise."""
    costs = StepCostModel("heavy")
    for fed in GRID:
        costs.record(fed, 0.100 * (1 + 0.05 * (fed - 1)), rows=4)
    costs.record(1, 0.400, rows=16)
    assert costs.estimate(9, rows=16) == pytest.approx(0.400 * 1.4)
    for per_row, probes in ((0.100, False), (0.001, True)):
        memory = BudgetMemory(costs, schedule={16: [0, 8]}, typical=[0.9, 0.8, 0.7, 0.5], draft_seconds=[per_row])
        assert Budget(memory).plan(16, no_drafts(16)).drafted is probes
        assert memory.schedule[16] == ([0, 8] if probes else [8, 16])


def test_a_depth_never_verified_takes_the_rate_of_the_deepest_depth_seen():
    """Nodes the budget cut never gain evidence; valued by the prior they would stay cut. A depth never verified
    borrows the deepest seen depth's rate, and a copy going on (a lookup node under a lookup node) is one rate for
    every depth."""
    from hf_specdec.verification.tree import DraftTree

    model = AcceptanceModel()
    tree = DraftTree()
    tree.add_chain([5, 6], merge=False)
    tree.copying = True
    for _ in range(30):
        model.record(tree, [0, 1])  # two copying lookup nodes, always accepted
    assert model.rate("copying", 1) > 0.9 and model.rate("copying", 4) == model.rate("copying", 1)
    assert model.rate("copying+", 2) > 0.9 and model.rate("copying+", 9) == model.rate("copying+", 2)
    assert model.rate("lookup", 3) == pytest.approx(0.3)  # no evidence at all: the prior


def test_a_copy_accepted_whole_is_verified_whole_on_the_measured_curve():
    """On the 2-core Xeon's measured curve (flat to 8 fed tokens, +30% at 15-19) a lookup branch that copies a span
    whole at every step is worth verifying whole beside the drafter's chain: its tenth node is valued by the
    copies seen (pooled over depths), not by a prior at each of its depths (0.7^10 before any evidence there)."""
    from hf_specdec.verification.tree import DraftTree

    copy = DraftTree()
    copy.add_chain(list(range(10, 20)), merge=False)
    copy.copying = True
    model = AcceptanceModel()
    for _ in range(3):  # three steps, each copying its whole branch of 10
        model.record(copy, list(range(10)))
    tree = best_first_tree([[-0.05, -3.0]] * 7, [[5, 6]] * 7, 8)  # the drafter's chain and one sibling
    tree.add_chain(list(range(30, 40)), merge=True)
    tree.copying = True
    values = model.node_values(tree)
    assert min(v for v, lookup in zip(values, tree.lookup, strict=True) if lookup) > 0.5
    costs = StepCostModel("xeon")
    costs.pin({1: 0.285, 8: 0.296, 9: 0.334, 14: 0.338, 15: 0.383, 19: 0.383})
    kept = Budget(BudgetMemory(costs, model), draft_seconds=0.09).plan(1, lambda: [tree]).trees[0]
    assert sum(kept.lookup) == 10


def test_siblings_share_one_position_and_a_copy_going_on_comes_first():
    """At most one child of a node is accepted, so siblings' chances given the parent sum to at most 1: on a copying
    step a drafted sibling of a copy's node is worth the chance that the copy breaks there, not the drafter's own
    confidence; elsewhere the likelier child keeps its chance and the other gets what is left."""
    from hf_specdec.decoding.acceptance_model import siblings_share

    assert siblings_share([-1, -1], [0.6, 0.9], [False, True]) == pytest.approx([0.1, 0.9])
    assert siblings_share([-1, -1], [0.6, 0.9], [False, False]) == pytest.approx([0.1, 0.9])
    assert siblings_share([-1, -1], [0.95, 0.6], [False, True]) == pytest.approx([0.4, 0.6])  # the copy first
    assert siblings_share([-1, -1, 0, 0], [0.9, 0.3, 0.7, 0.7], [False] * 4) == pytest.approx([0.9, 0.1, 0.7, 0.3])
    from hf_specdec.verification.tree import DraftTree

    copy = DraftTree()
    copy.add_chain(list(range(10, 20)), merge=False)
    copy.copying = True
    model = AcceptanceModel()
    for _ in range(3):
        model.record(copy, list(range(10)))
    tree = best_first_tree([[-0.05, -1.0]] * 4, [[5, 6]] * 4, 6)  # a chain and siblings the drafter likes
    tree.add_chain([6, 30, 31, 32], merge=True)  # the copy agrees with the drafter's second choice at depth 1
    tree.copying = True
    values = model.node_values(tree)
    copy_start = next(i for i in range(len(tree)) if tree.copied[i])
    assert tree.tokens[copy_start] == 6 and not tree.lookup[copy_start]
    assert values[copy_start] > 0.9  # the copy's estimate, not the drafter's q of its second choice (0.37)
    drafted_top = tree.tokens.index(5)
    assert values[drafted_top] < 0.1  # the chance the copy breaks at depth 1
    costs = StepCostModel("xeon")
    costs.pin({1: 0.285, 8: 0.296, 9: 0.334, 14: 0.338, 15: 0.383, 19: 0.383})
    kept = Budget(BudgetMemory(costs, model), draft_seconds=0.09).plan(1, lambda: [tree]).trees[0]
    assert [kept.tokens[i] for i in range(len(kept)) if kept.from_lookup(i)] == [6, 30, 31, 32]


def test_a_first_try_at_a_load_asks_the_models_and_catch_up_passes_are_not_drafter_samples():
    """At a load never drafted in this call, with the drafter's cost and typical drafts known from before, drafting
    starts only where the models give it a chance (a size with no estimate counts as cheap as one token, the hopeful
    side). A drafter pass right after plain steps or a join also reads what it missed (the step reports it:
    `StepRecord.caught_up`): not a sample of its cost."""
    costs = StepCostModel("first-try")
    costs.record(1, 0.400, rows=16)  # the one-token cost only, no other load measured
    for per_row, drafts in ((0.100, False), (0.001, True)):
        memory = BudgetMemory(costs, typical=[0.9, 0.8, 0.7, 0.5], draft_seconds=[per_row])
        assert Budget(memory).plan(16, no_drafts(16)).drafted is drafts
    memory = BudgetMemory(costs, draft_seconds=[0.002])
    budget = Budget(memory)
    assert budget.plan(16, no_drafts(16)).drafted
    plan = drafted(best_first_tree([[-0.01] * 2] * 7, [[5, 6]] * 7, 8), 16)  # what the drafter's passes drafted
    budget.learn(StepRecord(plan, [[]] * 16, 9, 0.5, 16 * 0.300, 16, caught_up=True))  # the first pass reads prompts
    assert memory.drafter_seconds == pytest.approx(0.002)
    budget.learn(StepRecord(plan, [[]] * 16, 9, 0.5, 16 * 0.004, 16))
    assert memory.draft_seconds == [0.002, 0.004]
    budget.learn(StepRecord(StepPlan.plain(16), [[]] * 16, 1, 0.4, 0.0, 16))  # a plain step: the next pass catches up
    budget.learn(StepRecord(plan, [[]] * 16, 9, 0.5, 16 * 0.300, 16, caught_up=True))
    assert memory.draft_seconds == [0.002, 0.004]


def test_one_slow_timing_does_not_rule_a_size_out_for_good():
    """A size timed once, slowly (a stall), would never be verified again and so never re-timed: for a single
    sequence, until `SETTLED` timings hold it, the budget measures it again, and a single timing weighs as one in the
    monotone fit. With several rows one timing decides (measuring again would cost every row's verify)."""
    from hf_specdec.decoding.step_cost import monotone

    assert monotone({9: 0.30, 11: 0.50, 17: 0.30}, {9: 8, 11: 1, 17: 3}) == pytest.approx({9: 0.30, 11: 0.35, 17: 0.35})
    tree = best_first_tree([[-0.01] * 2] * 16, [[5, 6]] * 16, 16)
    sure = always_accepted(tree)
    costs = StepCostModel("stall")
    for fed in (1, 2, 4, 8):
        for _ in range(SETTLED):
            costs.record(fed, 0.200)
    costs.record(16, 0.900)  # one stalled step at 16 tokens
    budget = Budget(BudgetMemory(costs, sure), draft_seconds=0.01)
    plan = budget.plan(1, lambda: [tree])
    assert len(plan.trees[0]) == 15 and plan.measuring  # measured again, not ruled out
    for _ in range(SETTLED - 1):
        costs.record(16, 0.200)
    assert costs.settled(16) and costs.cost(16) == pytest.approx(0.200)
    plan = budget.plan(1, lambda: [tree])
    assert len(plan.trees[0]) == 16 and not plan.measuring  # now chosen because it pays
    heavy = StepCostModel("stall-rows")  # several rows: a measuring step costs every row's verify; one timing decides
    for fed in (1, 2, 4, 8):
        for _ in range(SETTLED):
            heavy.record(fed, 0.200, rows=4)
    heavy.record(16, 0.900, rows=4)
    plan = Budget(BudgetMemory(heavy, sure), draft_seconds=0.01).plan(4, lambda: [tree] * 4)
    assert len(plan.trees[0]) == 7 and not plan.measuring


def test_the_copy_s_tables_count_only_the_nodes_the_copy_alone_proposed():
    """A node the drafter and the copy both proposed is far likelier right than one the copy alone proposed, the only
    kind the lookup tables value alone: merged nodes count as the drafter's, so a copy that agrees with the drafter
    whenever it is right and is always wrong alone is valued by its misses, not by the drafter's hits."""
    from hf_specdec.verification.tree import DraftTree

    model = AcceptanceModel()
    for _ in range(30):
        tree = best_first_tree([[-0.05, -3.0]] * 2, [[5, 6]] * 2, 2)  # the drafter's chain 5, 5 (always right)
        tree.add_chain([5, 9, 9], merge=True)  # the copy agrees at depth 1, then goes its own way (always wrong)
        assert tree.copied.count(True) == 1 and sum(tree.lookup) == 2
        model.record(tree, [0, 1])
    assert model.counts["lookup"] == {}  # no start the copy alone proposed was verified
    assert model.rate("lookup+", 2) < 0.05  # its own nodes: 0 of 30 accepted, not the merged node's 30 of 30
    assert model.counts["drafted"][1].accepted == pytest.approx(model.counts["drafted"][1].tried)
    tree = DraftTree()
    tree.add_chain([7, 8], merge=False)
    assert model.node_values(tree)[0] == pytest.approx(0.3)  # a start the copy alone proposes: still the prior


def test_the_step_reports_the_passes_in_which_the_drafter_first_catches_up(monkeypatch):
    """The drafter's first pass over a row reads its prompt, and a pass after a plain step reads that step's tokens
    too: the step reports such passes (`StepRecord.caught_up`, not a sample of the drafter's cost), and a request
    joining a server makes the next pass catch up again. Here every third step is planned plain."""
    import hf_specdec.decoding.batch as batch_module

    records: list[StepRecord] = []

    class Scripted(Budget):
        def plan(self, rows, draft):
            if len(records) % 3 == 2:
                return StepPlan.plain(rows)
            drafts = draft()
            return StepPlan(True, drafts, drafts)

        def learn(self, record):
            records.append(record)

    monkeypatch.setattr(batch_module, "Budget", Scripted)
    target = tiny_target("llama")
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, VOCAB - 1, (n,), generator=g) for n in (9, 6)]
    drafter = make_drafter(target, 4)
    drafter.decoding = AUTO
    settings = dict(do_sample=False, max_new_tokens=12, eos_token_id=None)
    ref = target.generate(prompts[0][None], **settings)
    out = target.generate(prompts[0][None], **settings, assistant_model=drafter)
    assert torch.equal(out, ref) and len(records) >= 5
    first_passes = [r.plan.drafted and (i == 0 or not records[i - 1].plan.drafted) for i, r in enumerate(records)]
    assert [r.caught_up for r in records] == first_passes
    records.clear()
    server = hf_specdec.SpeculativeServer(target, drafter, max_batch_size=2, do_sample=False)
    first = server.submit(prompts[0], 12)
    server.step()
    second = server.submit(prompts[1], 12)  # joins: the next pass reads its prompt
    server.step()
    assert [r.plan.drafted for r in records] == [True, True] and [r.caught_up for r in records] == [True, True]
    server.run()
    for request, prompt in ((first, prompts[0]), (second, prompts[1])):
        assert torch.equal(request.output_ids, target.generate(prompt[None], max_new_tokens=12, do_sample=False)[0])


def test_the_memory_is_kept_on_the_drafter_and_a_broken_cache_never_fails_a_call(tmp_path, monkeypatch, caplog):
    """One object holds what the budget learns (`drafter.budget_memory`, with the target's curve), kept between
    calls; its one save writes the curve to the cache file at the end of a call. A cache that cannot be written (its
    folder is a file) or read (garbage in the file) costs only its measurements: generate and the server decode."""
    from hf_specdec.decoding import step_cost
    from hf_specdec.decoding.budget_memory import memory_of

    target = tiny_target("llama")
    prompt = torch.randint(3, VOCAB - 1, (1, 10), generator=torch.Generator().manual_seed(4))
    drafter = make_drafter(target, 4)
    drafter.decoding = AUTO
    ref = target.generate(prompt, do_sample=False, max_new_tokens=10, eos_token_id=None)

    def decode():
        return target.generate(prompt, do_sample=False, max_new_tokens=10, eos_token_id=None, assistant_model=drafter)

    monkeypatch.setattr(step_cost, "_MODELS", {})  # curves loaded afresh from the files below
    monkeypatch.setenv("HF_SPECDEC_CACHE", str(tmp_path / "cache"))
    assert torch.equal(decode(), ref)
    memory = drafter.budget_memory
    assert memory_of(drafter, target) is memory and memory.costs is hf_specdec.cost_model(target)
    saved = json.loads((tmp_path / "cache" / "step_costs.json").read_text())
    assert saved[memory.costs.key] and memory.unsaved is None  # the curve measured in the call, saved at its end
    assert torch.equal(decode(), ref) and drafter.budget_memory is memory  # the next call: the same memory

    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder should be")
    monkeypatch.setenv("HF_SPECDEC_CACHE", str(blocked))
    assert torch.equal(decode(), ref)
    assert memory.unsaved and not memory.save() and "not saved" in caplog.text
    server = hf_specdec.SpeculativeServer(target, drafter, max_batch_size=2, do_sample=False)
    request = server.submit(prompt[0], 10)
    server.run()
    assert torch.equal(request.output_ids, ref[0])

    monkeypatch.setenv("HF_SPECDEC_CACHE", str(tmp_path / "cache"))
    key = memory.costs.key
    damaged = json.dumps({key: {"x": 1, "1": {"2": "slow", "3": [0.1]}}})
    for garbage, kept in (("[1, 2]", {}), ("{not json", {}), (damaged, {1: {3: [0.1]}})):
        (tmp_path / "cache" / "step_costs.json").write_text(garbage)
        monkeypatch.setattr(step_cost, "_MODELS", {})
        assert hf_specdec.cost_model(target).points == kept  # what parses is kept, the rest left out
        assert torch.equal(decode(), ref)
