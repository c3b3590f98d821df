"""What the adaptive budget decides on a given cost curve: the drafts per step it verifies and the expected speedup.

For issue-style questions ("on a CPU where 8 tokens cost 2.7x one, what does it do?") without that machine: pin the
curve (measured elsewhere) into a `StepCostModel`, teach an `AcceptanceModel` a drafter's per-depth acceptance, and
ask the real `Budget` for its choice on a chain of drafts (and on a best-first tree) of that drafter.
"""

from __future__ import annotations

from hf_specdec.decoding.acceptance_model import AcceptanceModel
from hf_specdec.decoding.budget import Budget
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
    """The budget's choice for a chain of len(rates) drafts on `curve_ms` ({fed tokens per row: ms} of `rows` rows):
    drafts verified per step, expected tokens per step, expected speedup over plain steps."""
    costs = StepCostModel("pinned")
    costs.pin({n: ms / 1000 for n, ms in curve_ms.items()}, rows)
    model = taught_model(rates)
    chain = DraftTree()
    for d in range(len(rates)):
        chain.add(1, d - 1)
    budget = Budget(costs, model, draft_seconds=draft_ms / 1000)
    values = [sorted(model.node_values(chain), reverse=True)] * rows
    best = budget._best(values, rows, len(rates))
    rate, plain = budget._rate(values, rows, best), rows / costs.cost(1, rows)
    return {
        "drafts": best,
        "expected_tokens_per_step": rate * (costs.cost(1 + best, rows) + rows * draft_ms / 1000) / rows,
        "expected_speedup": max(rate, plain) / plain,
        "plain_steps": rate < plain,
    }


__all__ = ["decision", "taught_model"]
