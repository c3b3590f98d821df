"""What the adaptive budget decides on a given cost curve: the drafts per step it verifies and the expected speedup;
and what a whole generation costs when the real `Budget` drives it over a recorded trace.

For questions such as "on a CPU where 8 tokens cost 2.7x one, what does it do?" without that machine: pin the curve
(measured elsewhere) into a `StepCostModel`, teach an `AcceptanceModel` a drafter's per-depth acceptance, and ask
the real `Budget` for its plan on a chain of drafts of that drafter (`decision`).

For "is a generation with this drafter ever slower than plain steps?": `replay` runs the real `Budget.plan` and
`Budget.learn` step by step over a `Trace` (per step, the tokens the target would commit next, drawn once from
per-depth acceptance rates), with synthetic drafts (a best-first tree or a sampled chain, a prompt-lookup branch at
some steps) and the seconds a machine would take (a verify cost curve, a drafter pass, and the extra a pass pays to
catch up on the tokens it missed), and returns the replayed seconds against those of plain one-token steps.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, field

from hf_specdec.decoding.acceptance_model import AcceptanceModel
from hf_specdec.decoding.budget import Budget, StepRecord
from hf_specdec.decoding.budget_memory import BudgetMemory
from hf_specdec.decoding.step_cost import GRID, SETTLED, StepCostModel
from hf_specdec.verification.tree import DraftTree, best_first_tree


def taught_model(rates: list[float], steps: int = 400) -> AcceptanceModel:
    """An acceptance model that has seen a chain drafter accept depth d (given depth d-1) at rates[d-1]."""
    model = AcceptanceModel()
    chain = DraftTree()
    for d in range(len(rates)):
        chain.add(1, d - 1)
    for i in range(steps):
        accepted, d = [], 0
        while d < len(rates) and (i * 7919 + d * 104729) % 1000 < 1000 * rates[d]:  # deterministic, rate-exact
            accepted.append(d)
            d += 1
        model.record(chain, accepted)
    return model


def decision(curve_ms: dict[int, float], rates: list[float], rows: int = 1, draft_ms: float = 0.0) -> dict:
    """The budget's plan for a chain of len(rates) drafts on `curve_ms` ({fed tokens per row: ms} of `rows` rows):
    drafts verified per step, expected tokens per step, expected speedup over plain steps."""
    costs = StepCostModel("pinned")
    costs.pin({n: ms / 1000 for n, ms in curve_ms.items()}, rows)
    model = taught_model(rates)
    chain = DraftTree()
    for d in range(len(rates)):
        chain.add(1, d - 1)
    plan = Budget(BudgetMemory(costs, model), draft_seconds=draft_ms / 1000).plan(rows, lambda: [chain] * rows)
    assert plan.drafted and not plan.measuring  # a first try at a load with no judged drafts: drafts, at a size
    best = len(plan.trees[0])
    per_row = 1 + sum(sorted(model.node_values(chain), reverse=True)[:best])  # expected committed tokens per row
    rate, plain = rows * per_row / (costs.cost(1 + best, rows) + rows * draft_ms / 1000), rows / costs.cost(1, rows)
    return {
        "drafts": best,
        "expected_tokens_per_step": per_row,
        "expected_speedup": max(rate, plain) / plain,
        "plain_steps": rate < plain,
    }


LOOKUP = 500  # token ids: the drafter's rank-r candidate at depth d is 1000 d + r, the lookup branch's 1000 d + LOOKUP


@dataclass
class Trace:
    """A recorded generation as the budget meets it: per step, the tokens the target commits next (what greedy
    acceptance, or speculative sampling, accepts of whatever the step verifies), drawn once from per-depth rates;
    step i of a replay meets step i of the trace, whatever the budget chose before.

    `rates[d]`: the chance that the drafter's depth d + 1 is right given depth d was (its top candidate with chance
    `top`, else one of the next); `q`: the drafter's confidence in its top candidates, from which a best-first tree
    of `tree_budget` nodes is built (`sampled`: a chain of exact-q draws instead, as at temperature 1). At a share
    `lookup` of the steps a prompt-lookup branch of `lookup_tokens` is proposed beside it, whose first node is right
    (where the drafter's is not) with chance `lookup_rates[0]` and each next with `lookup_rates[1]`."""

    rates: list[float]
    q: tuple[float, ...] = (0.45, 0.2, 0.1, 0.05)
    top: float = 0.9
    sampled: bool = False
    tree_budget: int = 8
    block: int = 8
    lookup: float = 0.0
    lookup_tokens: int = 10
    lookup_rates: tuple[float, float] = (0.1, 0.5)
    steps: list[tuple[bool, list[int]]] = field(default_factory=list)  # per step: a lookup branch?, the target's tokens

    def draw(self, steps: int, seed: int) -> Trace:
        """Record `steps` steps (seeded): this trace, filled."""
        rng = random.Random(seed)
        self.steps = []
        for _ in range(steps):
            proposed = rng.random() < self.lookup
            tokens: list[int] = []
            if proposed and rng.random() < self.lookup_rates[0]:
                tokens.append(1000 + LOOKUP)
                while len(tokens) < self.lookup_tokens and rng.random() < self.lookup_rates[1]:
                    tokens.append(1000 * (len(tokens) + 1) + LOOKUP)
            else:
                for rate in self.rates:
                    if rng.random() >= rate:
                        break
                    rank = 0 if self.sampled or rng.random() < self.top else 1 + int(rng.random() * (len(self.q) - 1))
                    tokens.append(1000 * (len(tokens) + 1) + rank)
            self.steps.append((proposed, tokens))
        return self

    def tree(self, depths: int, proposed: bool, copying: bool) -> DraftTree:
        """A step's draft as drafted: the drafter's `depths` positions, and the lookup branch when `proposed`."""
        if depths <= 0:
            return DraftTree()
        if self.sampled:
            tree = DraftTree()
            for d in range(depths):
                tree.add(1000 * (d + 1), d - 1, q_row=d)
        else:
            logq = [[math.log(x) for x in self.q]] * depths
            ids = [[1000 * (d + 1) + r for r in range(len(self.q))] for d in range(depths)]
            tree = best_first_tree(logq, ids, self.tree_budget)
        if proposed:
            tree.add_chain([1000 * d + LOOKUP for d in range(1, self.lookup_tokens + 1)], merge=not self.sampled)
        tree.copying = copying
        return tree

    def tau(self) -> float:
        """Tokens committed per target forward were every step to verify its whole draft (no budget)."""
        whole = [accepted(self.tree(self.block - 1, proposed, False), truth) for proposed, truth in self.steps]
        return 1 + sum(map(len, whole)) / len(whole)


def accepted(tree: DraftTree, truth: list[int]) -> list[int]:
    """The nodes of `tree` the target accepts when it commits `truth` next: the path that spells its prefix."""
    path, node = [], -1
    for token in truth:
        node = next((i for i, p in enumerate(tree.parents) if p == node and tree.tokens[i] == token), None)
        if node is None:
            break
        path.append(node)
    return path


@dataclass
class Machine:
    """The seconds of a step: a target forward by fed tokens (`curve`, linear between its points and beyond them on
    the last segment, with a jitter of `jitter` of it), a drafter pass (`drafter` s) and, on a pass that first
    catches up, `per_missed` s for each token it missed (a call's `prompt` on its first pass, after that the tokens
    plain steps committed), and the budget's own planning (`plan` s, every step)."""

    curve: dict[int, float] = field(default_factory=lambda: {1: 0.22, 8: 0.24, 16: 0.30, 32: 0.40})
    drafter: float = 0.11
    per_missed: float = 0.002
    prompt: int = 64
    plan: float = 0.0001
    jitter: float = 0.02

    def verify(self, fed: int) -> float:
        """Seconds of a target forward over `fed` tokens, before jitter."""
        ns = sorted(self.curve)
        i = next((k for k in range(1, len(ns)) if fed <= ns[k]), len(ns) - 1)
        lo, hi = ns[i - 1], ns[i]
        return self.curve[lo] + (self.curve[hi] - self.curve[lo]) * (fed - lo) / (hi - lo)


@dataclass
class Replayed:
    """What a replayed generation cost, against the same tokens in plain one-token steps."""

    seconds: float
    plain_seconds: float
    steps: int
    drafted: int  # steps that ran the drafter
    accepted: int  # drafts accepted over all steps

    @property
    def speed(self) -> float:
        """Replayed speed over plain steps' (above 1: faster)."""
        return self.plain_seconds / self.seconds


def replay(memory: BudgetMemory, trace: Trace, tokens: int, machine: Machine | None = None, seed: int = 0) -> Replayed:
    """One generation of `tokens` new tokens driven by the real `Budget` over `trace`, as `speculative_step` drives
    it: `plan` (which calls the draft only when it drafts), then `learn` with the accepted path, the fed width and
    the seconds the `machine` takes (jitter seeded by `seed`), and whether the drafter's pass first caught up.
    `memory` carries over between calls, as the drafter's does."""
    machine = machine or Machine()
    rng = random.Random(seed)
    budget = Budget(memory)
    done = steps = drafted = taken = 0
    seconds, behind, missed, copying = 0.0, True, machine.prompt, False
    while done < tokens:
        proposed, truth = trace.steps[steps % len(trace.steps)]
        room = min(trace.block - 1, tokens - done - 1)
        plan = budget.plan(1, functools.partial(_drafts, trace, room, proposed and room > 0, copying))
        tree = plan.trees[0]
        path = accepted(tree, truth)
        verify = machine.verify(1 + len(tree)) * (1 + rng.gauss(0, machine.jitter))
        draft_seconds = machine.plan
        if plan.drafted:
            draft_seconds += machine.drafter * (1 + rng.gauss(0, machine.jitter)) + machine.per_missed * missed
        committed = min(len(path) + 1, tokens - done)
        caught_up, behind = plan.drafted and behind, not plan.drafted
        missed = 0 if plan.drafted else missed + committed
        copying = any(tree.from_lookup(i) for i in path)
        budget.learn(StepRecord(plan, [path], 1 + len(tree), verify, draft_seconds, committed, caught_up))
        seconds += verify + draft_seconds
        done += committed
        steps += 1
        drafted += plan.drafted
        taken += len(path)
    return Replayed(seconds, tokens * machine.verify(1), steps, drafted, taken)


def _drafts(trace: Trace, depths: int, proposed: bool, copying: bool) -> list[DraftTree]:
    return [trace.tree(depths, proposed, copying)]


def generations(
    kind: dict, tokens: int, calls: int, seed: int, memory: BudgetMemory | None = None, warm_up: bool = True
) -> tuple[BudgetMemory, list[Replayed]]:
    """`calls` generations of `tokens` tokens, each over its own trace of `Trace(**kind)` (another prompt of the same
    kind), with one drafter's memory, as a benchmark runs them: after one warm-up generation (not returned) unless
    `warm_up` is False, on a curve already measured (as loaded from the cache file) unless `memory` is given."""
    memory = memory or BudgetMemory(measured_curve(Machine()))
    if warm_up:
        replay(memory, Trace(**kind).draw(8 * tokens, 1000 * seed + 999), tokens, seed=1000 * seed + 999)
    runs = [
        replay(memory, Trace(**kind).draw(8 * tokens, 1000 * seed + i), tokens, seed=1000 * seed + i)
        for i in range(calls)
    ]
    return memory, runs


def measured_curve(machine: Machine) -> StepCostModel:
    """The curve of `machine` as real steps would have measured it at the grid's sizes (settled)."""
    costs = StepCostModel("replay")
    for fed in GRID:
        for _ in range(SETTLED):
            costs.record(fed, machine.verify(fed))
    return costs


def speed(runs: list[Replayed]) -> float:
    """Plain steps' seconds over the replayed seconds, all `runs` together."""
    return sum(r.plain_seconds for r in runs) / sum(r.seconds for r in runs)


__all__ = [
    "LOOKUP",
    "Machine",
    "Replayed",
    "Trace",
    "accepted",
    "decision",
    "generations",
    "measured_curve",
    "replay",
    "speed",
    "taught_model",
]
