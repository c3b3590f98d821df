"""Whole generations replayed through the real adaptive budget: never slower than plain steps where drafting loses,
faster where it pays.

A replay (`budget_decisions.replay`) drives `Budget.plan` / `Budget.learn` step by step as the speculative step
does, over a recorded trace (per step, the tokens the target commits next, drawn once from per-depth acceptance
rates), with synthetic drafts (a best-first tree of 8 nodes from a drafter's top-4, or a chain of samples at
temperature 1, and at some steps a prompt-lookup branch of 10) and the seconds of the 2-core CPU these numbers come
from: a 1.5B target's forward costs 0.22 s for 1 fed token, 0.24 s for 8 (0.30 for 16, 0.40 for 32), a 0.5B PARD
drafter's pass 0.11 s, plus 2 ms for each token a pass first catches up on (the prompt, 64 tokens, on a call's
first pass; the tokens plain steps committed, on a probe's). A benchmark's generations share one drafter memory
after a warm-up generation, on a curve already measured.

The tolerance where drafting loses, 1.02x the time of plain steps, is what trying costs. The budget still drafts
once at each call's first step and probes after up to `MAX_BACKOFF` plain steps while drafting loses narrowly, up
to `CLEAR_BACKOFF` once it loses clearly; a try costs a pass (half a plain step here) and its catch-up (about 1% of
the time of the plain steps whose tokens it reads, or a 64-token prompt's 0.13 s), less what it commits: a call's
first try about 1.1 plain steps (1.2% of a 96-token generation), probes every 64 plain steps 1.7% of their time,
every 256 1.1%. Without those tries a drafter that lost on one text would never draft on the next, where it wins
(`test_a_drafter_that_lost_on_chat_drafts_again_on_code`).
"""

from __future__ import annotations

import pytest
from budget_decisions import Machine, Trace, generations, measured_curve, replay, speed

from hf_specdec.decoding.acceptance_model import AcceptanceModel
from hf_specdec.decoding.budget import CLEAR_BACKOFF, JUDGED_AFTER, MAX_BACKOFF, PRIOR, Budget, StepPlan, StepRecord
from hf_specdec.decoding.budget_memory import BudgetMemory
from hf_specdec.verification.tree import DraftTree, best_first_tree

# A confident PARD drafter (top-1 q 0.8) that is mostly wrong: a chat answer, tau 1.26 verifying every draft
CHAT = dict(rates=[0.2] + [0.1] * 6, q=(0.8, 0.1, 0.05, 0.03), lookup=0.3, lookup_rates=(0.1, 0.5))
CREATIVE = dict(rates=[0.15] + [0.1] * 6, q=(0.8, 0.1, 0.05, 0.03), lookup=0.2, lookup_rates=(0.1, 0.5))  # tau 1.19
# the DBLAST head sampling at T=1 (exact-q chains, tau 1.065; 1.04 for the second)
DBLAST_T1 = dict(rates=[0.04] + [0.25] * 6, sampled=True, lookup=0.2, lookup_rates=(0.03, 0.5))
DBLAST_T1_WORSE = dict(rates=[0.02] + [0.25] * 6, sampled=True, lookup=0.2, lookup_rates=(0.02, 0.5))
# a drafter that pays: 85%, 52%, 31% per depth, tau 2.57
CODE = dict(rates=[0.85, 0.52, 0.31] + [0.3] * 4, q=(0.8, 0.1, 0.04, 0.02), lookup=0.3, lookup_rates=(0.3, 0.8))
KINDS = {"chat": CHAT, "creative": CREATIVE, "dblast-t1": DBLAST_T1, "dblast-t1-worse": DBLAST_T1_WORSE, "code": CODE}
SEEDS = (0, 1, 2)


def test_the_traces_commit_what_such_generations_were_measured_to():
    """tau (tokens per target forward, every draft verified whole): chat 1.23, DBLAST at T=1 1.03-1.08, a drafter
    that pays about 2.5."""
    taus = {name: Trace(**kind).draw(4000, 0).tau() for name, kind in KINDS.items()}
    assert 1.2 < taus["chat"] < 1.3 and 1.15 < taus["creative"] < 1.25
    assert 1.03 <= taus["dblast-t1-worse"] < taus["dblast-t1"] <= 1.08
    assert 2.4 < taus["code"] < 2.7


@pytest.mark.parametrize(
    "kind, tokens, calls",
    [(CHAT, 384, 2), (CREATIVE, 96, 4), (DBLAST_T1, 96, 4), (DBLAST_T1, 384, 2), (DBLAST_T1_WORSE, 96, 4)],
    ids=["chat-384", "creative-96", "dblast-t1-96", "dblast-t1-384", "dblast-t1-worse-96"],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_where_drafting_loses_a_generation_is_never_slower_than_plain_steps(kind, tokens, calls, seed):
    _, runs = generations(kind, tokens, calls, seed)
    assert speed(runs) >= 1 / 1.02
    assert sum(r.drafted for r in runs) <= 0.05 * sum(r.steps for r in runs)  # plain steps, but for the tries


@pytest.mark.parametrize("seed", SEEDS)
def test_where_drafting_pays_it_drafts_and_wins(seed):
    """tau 2.57 at 0.35 s a drafted step against 0.22 s a plain one: about 1.5x where every step drafts."""
    _, runs = generations(CODE, 384, 2, seed)
    assert speed(runs) >= 1.4
    assert sum(r.drafted for r in runs) >= 0.75 * sum(r.steps for r in runs)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_drafter_that_lost_on_chat_drafts_again_on_code(seed):
    """After three chat answers in plain steps, the same drafter on code: each call's first step tries it (a probe,
    judged by what it committed), so the code is drafted and faster than plain steps, though a first try that
    happens to commit one token leaves that call plain."""
    memory, chat = generations(CHAT, 384, 3, seed)
    assert speed(chat) >= 1 / 1.02
    _, code = generations(CODE, 384, 2, seed + 50, memory=memory, warm_up=False)
    assert speed(code) >= 1.15


def test_a_text_that_turns_drafter_friendly_within_a_call_is_drafted():
    """A chat answer that turns to code after 150 steps, in one call of 600 tokens: the probes that go on while
    drafting loses (after up to `CLEAR_BACKOFF` plain steps) find the code and drafting resumes; never slower."""
    speeds = []
    for seed in SEEDS:
        memory, _ = generations(CHAT, 384, 1, seed)
        turning = Trace(**CHAT).draw(150, 7 * seed + 1)
        turning.steps += Trace(**CODE).draw(3000, 7 * seed + 2).steps
        speeds.append(replay(memory, turning, 600, seed=seed).speed)
    assert min(speeds) >= 1 / 1.02 and sum(speeds) / len(speeds) >= 1.1


def curve_memory(acceptance: AcceptanceModel | None = None, **fields) -> BudgetMemory:
    """A memory on the replayed machine's measured curve (plain steps: 1 / 0.22 s = 4.5 tokens/s)."""
    return BudgetMemory(measured_curve(Machine()), acceptance or AcceptanceModel(), **fields)


def chain(depths: int = 7) -> DraftTree:
    """A confident drafter's chain (q = 0.8 a depth, as best-first path scores)."""
    return best_first_tree([[-0.223, -2.3]] * depths, [[5, 6]] * depths, depths)


def taught(rates: list[float], steps: int = 400) -> AcceptanceModel:
    """An acceptance model that has seen `chain()`'s depth d accepted (given depth d - 1) at rates[d - 1]."""
    model, tree = AcceptanceModel(), chain(len(rates))
    for i in range(steps):
        depth = 0
        while depth < len(rates) and (i * 7919 + depth * 104729) % 1000 < 1000 * rates[depth]:  # rate-exact
            depth += 1
        model.record(tree, tree.path_to(depth - 1) if depth else [])
    return model


def drafted_step(plan: StepPlan, committed: int, draft: float, caught_up: bool) -> StepRecord:
    """A drafted step that committed `committed` tokens (its first `committed - 1` drafts) in a verify of 0.24 s."""
    tree = plan.trees[0]
    path = tree.path_to(committed - 2) if committed > 1 and tree.is_chain() else []
    return StepRecord(plan, [path], 1 + len(tree), 0.24, draft, committed, caught_up)


def plain_steps_until_drafted(budget: Budget, tree: DraftTree, limit: int = 2000) -> tuple[StepPlan, int]:
    """Plan (and learn) plain steps until a step drafts: that step's plan and the plain steps before it."""
    for plain in range(limit):
        plan = budget.plan(1, lambda: [tree])
        if plan.drafted:
            return plan, plain
        budget.learn(StepRecord(plan, [[]], 1, 0.22, 0.0, 1))
    raise AssertionError("never drafted")


def test_a_plain_step_leaves_the_acceptance_counts_as_they_are():
    """Only a verified draft is evidence: a run of plain steps no longer fades what the drafter was seen to achieve
    back to the hopeful prior (0.5 per depth, the drafter's own confidence), which made every due probe look
    worth drafting on."""
    model = taught([0.2] + [0.1] * 6)
    tree = chain()
    before = model.node_values(tree)
    for _ in range(64):
        model.record(DraftTree(), [])
    assert model.node_values(tree) == pytest.approx(before)
    assert sum(before) < 0.3 < 2 < sum(PRIOR.node_values(tree))


def test_a_depth_never_verified_borrows_the_calibration_of_the_deepest_depth_seen():
    """A confident drafter (q = 0.8 a depth) whose first draft is accepted 20% of the time, verified one draft a
    step: its deeper drafts, never verified, are valued with depth 1's calibration (0.25), not at its own confidence
    (calibration 1, which valued its chain of 7 at 1.8 committed tokens a step)."""
    model = AcceptanceModel()
    for i in range(200):
        model.record(chain(1), [0] if i % 5 == 0 else [])
    assert model.calibration(4) == pytest.approx(model.calibration(1))
    assert model.calibration(1) == pytest.approx(0.25, abs=0.02)
    assert 1 + sum(model.node_values(chain())) == pytest.approx(1.25, abs=0.02)


def test_a_probe_is_judged_by_what_it_committed_not_by_the_models():
    """In plain mode, a probe whose drafts the models value highly (a drafter always right before) but which
    commits one token in a drafted step's seconds: plain steps follow, for longer."""
    tree = chain()
    sure = AcceptanceModel()
    for _ in range(40):
        sure.record(tree, tree.path_to(6))
    memory = curve_memory(sure, schedule={1: [0, 8]}, draft_seconds=[0.11])
    budget = Budget(memory)
    plan = budget.plan(1, lambda: [tree])
    assert plan.drafted and len(plan.trees[0]) == 7  # the models verify the whole chain
    budget.learn(drafted_step(plan, 1, 0.11, caught_up=True))
    assert memory.schedule[1] == [8, 16] and not budget.plan(1, lambda: [tree]).drafted


def test_a_probe_s_catch_up_on_plain_steps_is_not_held_against_drafting_on():
    """A probe's pass first reads the tokens plain steps committed (here 0.2 s more): spent whatever comes next, so
    the probe is judged at the drafter's usual seconds, and one that commits 2 tokens in 0.11 + 0.24 s (5.7
    tokens/s against plain steps' 4.5) drafts on. A join's catch-up between drafted steps counts in full."""
    tree = chain()
    memory = curve_memory(schedule={1: [0, 8]}, draft_seconds=[0.11])
    budget = Budget(memory)
    plan = budget.plan(1, lambda: [tree])
    budget.learn(drafted_step(plan, 2, 0.31, caught_up=True))
    assert memory.schedule[1] == [0, 8]
    plan = budget.plan(1, lambda: [tree])
    assert plan.drafted
    budget.learn(drafted_step(plan, 2, 0.31, caught_up=True))  # a join: 4 tokens in 0.9 s, below plain steps
    assert memory.schedule[1] == [8, 16]


def test_drafting_that_pays_once_does_not_restart_the_probe_ladder():
    """A probe that pays resumes drafting but keeps the back-off it had reached: a lucky step in a text the drafter
    loses on used to reset it to 2, then climb 2, 4, ..., 64 again, a probe (and its catch-up) at each rung. Once
    `JUDGED_AFTER` drafted steps pay, each further one halves it."""
    tree = chain()
    memory = curve_memory(schedule={1: [0, 64]}, draft_seconds=[0.11])
    budget = Budget(memory)
    for step in range(1, JUDGED_AFTER + 2):
        plan = budget.plan(1, lambda: [tree])
        assert plan.drafted
        budget.learn(drafted_step(plan, 4, 0.11, caught_up=step == 1))  # 4 tokens in 0.35 s
        assert memory.schedule[1] == [0, 64 if step < JUDGED_AFTER else 64 >> (step - JUDGED_AFTER + 1)]


@pytest.mark.parametrize("commits, cap", [((1, 1), CLEAR_BACKOFF), ((1, 2), MAX_BACKOFF)], ids=["clearly", "narrowly"])
def test_the_back_off_grows_past_max_backoff_only_where_drafting_clearly_loses(commits, cap):
    """Probes that commit 1 token a drafted step (2.9 tokens/s, under 80% of plain steps' 4.5): the back-off doubles
    up to `CLEAR_BACKOFF`. Probes of 1 and 2 tokens in turn (4.3 tokens/s, narrowly below): up to `MAX_BACKOFF`,
    since a small change of text could make drafting pay."""
    tree = chain()
    memory = curve_memory(taught([0.2] + [0.1] * 6), schedule={1: [0, 2]}, draft_seconds=[0.11])
    budget = Budget(memory)
    backoffs = []
    for probe in range(12):
        plan, plain = plain_steps_until_drafted(budget, tree)
        backoffs.append(plain)
        budget.learn(drafted_step(plan, commits[probe % 2], 0.11, caught_up=True))
    assert max(backoffs) == cap and backoffs == sorted(backoffs)


def test_a_call_tries_its_first_step_even_where_drafting_clearly_lost():
    """A new call is new text: where the last one left the load clearly losing, its first step still drafts (the
    drafter reads the prompt only; a win pays for the whole call); one that loses again puts it back to plain steps
    for the carried back-off. Where drafting lost narrowly the call starts where the last one left off."""
    tree = chain()
    memory = curve_memory(taught([0.2] + [0.1] * 6), schedule={1: [300, CLEAR_BACKOFF]}, draft_seconds=[0.11])
    budget = Budget(memory)
    plan = budget.plan(1, lambda: [tree])
    assert plan.drafted
    budget.learn(drafted_step(plan, 1, 0.11 + 0.002 * 64, caught_up=True))
    assert memory.schedule[1] == [CLEAR_BACKOFF, CLEAR_BACKOFF] and not budget.plan(1, lambda: [tree]).drafted
    memory.schedule[1] = [30, MAX_BACKOFF]
    assert not Budget(memory).plan(1, lambda: [tree]).drafted and memory.schedule[1] == [29, MAX_BACKOFF]


def test_a_due_probe_is_skipped_only_where_no_drafter_could_pay():
    """The drafts judged last are kept valued at least as the prior values them (`BudgetMemory.typical`), so a single
    sequence with a drafter that loses on this text still probes when the probe is due (the next text may differ),
    while a load where even a new drafter's drafts could not pay (16 rows on a steep curve, tests/test_budget.py)
    skips them; a drafter better than the prior keeps its own values there."""
    tree = chain()
    memory = curve_memory(taught([0.05] * 7), draft_seconds=[0.11])
    budget = Budget(memory)
    plan = budget.plan(1, lambda: [tree])
    budget.learn(drafted_step(plan, 1, 0.11, caught_up=False))
    assert memory.typical == pytest.approx(sorted(PRIOR.node_values(tree), reverse=True))
    assert 1 + sum(memory.acceptance.node_values(tree)) < 1.1  # what the models expect of this drafter
    due = memory.schedule[1][0]
    _, plain = plain_steps_until_drafted(budget, tree)
    assert due > 0 and plain == due  # the probe ran when due
    strong = curve_memory(taught([0.95] * 7), draft_seconds=[0.11])
    budget = Budget(strong)
    budget.learn(drafted_step(budget.plan(1, lambda: [tree]), 1, 0.11, caught_up=False))
    assert strong.typical == pytest.approx(sorted(strong.acceptance.node_values(tree), reverse=True))
    assert sum(strong.typical) > sum(PRIOR.node_values(tree))
