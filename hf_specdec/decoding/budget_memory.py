"""What the adaptive budget learns and keeps between calls: one object, kept on the drafter (docs/budget.md section 3).

`BudgetMemory` holds the acceptance counts (`AcceptanceModel`), the plain/probe schedule per load, the drafter's
measured seconds and the step-cost curve of the target it decodes for (`StepCostModel`). `memory_of(drafter,
target)` returns the drafter's memory, made on first use, with the target's curve bound to it. The budget of a call
(`Budget`) reads and writes it; `save()` is its one explicit save: it writes the curve to the cache file, and never
raises for that file.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .acceptance_model import AcceptanceModel
from .step_cost import StepCostModel, cost_model


@dataclass
class BudgetMemory:
    """The adaptive budget's memory of one drafter: acceptance counts, schedule, drafter seconds and cost curve."""

    costs: StepCostModel  # seconds of a target forward by rows and fed tokens (this machine's, for the target)
    acceptance: AcceptanceModel = field(default_factory=AcceptanceModel)
    # per batch size: [plain steps left before the next probe, plain steps after the next failed probe], so a later
    # call at the same load starts where this one left off instead of probing afresh
    schedule: dict[int, list[int]] = field(default_factory=dict)
    draft_seconds: list[float] = field(default_factory=list)  # the drafter's seconds per row, recent drafted steps
    # node values of the last judged drafts, best first, each the higher of the acceptance model's prior (what a
    # drafter with no evidence is credited with) and the drafter's record: what a probe is asked whether it could pay
    typical: list[float] = field(default_factory=list)
    unsaved: str | None = None  # why the last `save()` could not write the cache file (None: it could)

    @property
    def drafter_seconds(self) -> float | None:
        """The drafter's seconds per row and drafted step: the median of the recent samples; None before any."""
        return statistics.median_low(self.draft_seconds) if self.draft_seconds else None

    def save(self) -> bool:
        """Write the cost curve into the cache file (`step_cost.cache_path()`; nothing while the curve is pinned or
        the cache is off). The rest lives as long as the drafter. A file that cannot be written keeps the curve in
        this process, with one warning per process for that file (`cost_cache.py`), never raised: returns False
        only when the write failed (`unsaved` says why)."""
        written = self.costs.save()
        self.unsaved = self.costs.unsaved
        return written

    def reset(self) -> None:
        """Forget the acceptance counts, the schedule and the drafter's seconds (the curve: `cost_model(t).reset()`)."""
        self.acceptance.reset()
        self.schedule, self.draft_seconds, self.typical = {}, [], []


def memory_of(drafter, target) -> BudgetMemory:
    """The drafter's budget memory (`drafter.budget_memory`, made on first use and kept between calls), bound to
    `target`'s cost curve on this machine (`cost_model(target)`, which `hf_specdec.cost_model` returns too)."""
    memory = getattr(drafter, "budget_memory", None)
    if not isinstance(memory, BudgetMemory):
        memory = BudgetMemory(cost_model(target))
        drafter.budget_memory = memory
    memory.costs = cost_model(target)
    return memory


__all__ = ["BudgetMemory", "memory_of"]
