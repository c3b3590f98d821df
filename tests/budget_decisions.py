"""What the adaptive budget decides on a given cost curve: the drafts per step it verifies and the expected speedup.

For questions such as "on a CPU where 8 tokens cost 2.7x one, what does it do?" without that machine: pin the curve
(measured elsewhere) into a `StepCostModel`, teach an `AcceptanceModel` a drafter's per-depth acceptance, and ask
the real `Budget` for its plan on a chain of drafts of that drafter.
"""

from __future__ import annotations

from hf_specdec.decoding.acceptance_model import AcceptanceModel
from hf_specdec.decoding.budget import Budget
from hf_specdec.decoding.budget_memory import BudgetMemory
from hf_specdec.decoding.step_cost import StepCostModel
from hf_specdec.verification.tree import DraftTree


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


__all__ = ["decision", "taught_model"]
