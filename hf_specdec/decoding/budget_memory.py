"""What the adaptive budget learns and keeps between calls: one object, kept on the drafter (docs/budget.md section 3).

`BudgetMemory` holds the acceptance counts (`AcceptanceModel`), the plain/probe schedule per load, the drafter's
measured seconds and the step-cost curve of the target it decodes for (`StepCostModel`). `memory_of(drafter,
target)` returns the drafter's memory, made on first use, with the target's curve bound to it. The budget of a call
(`Budget`) reads and writes it; `save()` is its one explicit save: it writes the curve to the cache file and the
budget's verdict on the drafter (schedule, drafter seconds, typical node values) beside it, and never raises for
either file. So a new process starts where the last one left off: on a machine where this drafter cannot pay, its
first call runs plain steps instead of paying a drafter pass over the prompt to learn it again.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import cost_cache
from .acceptance_model import AcceptanceModel
from .step_cost import StepCostModel, cache_path, cost_model

KEPT = 64  # drafter seconds and typical node values kept in the file, at most (the budget keeps fewer)


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
    key: str | None = None  # the file's key for this drafter with this target (None: the verdict is not saved)
    # before the drafter is timed: its parameters over the target's, and the drafts one pass proposes (None: unknown)
    share: float | None = None
    block: int | None = None

    @property
    def drafter_seconds(self) -> float | None:
        """The drafter's seconds per row and drafted step: the median of the recent samples; None before any."""
        return statistics.median_low(self.draft_seconds) if self.draft_seconds else None

    def save(self) -> bool:
        """Write the cost curve into the cache file (`step_cost.cache_path()`) and the verdict (`verdict()`) into
        `budget_memory.json` beside it; nothing while the curve is pinned or the cache is off. The acceptance counts
        live as long as the drafter. A file that cannot be written keeps what it would hold in this process, with
        one warning per process for that file (`cost_cache.py`; the verdict is not tried where the curve's folder
        failed), never raised: returns False only when a write failed (`unsaved` says why)."""
        written = self.costs.save()
        self.unsaved = self.costs.unsaved
        folder = budget_folder(self.costs)
        if written and self.key and folder is not None and not self.costs.pinned:
            self.unsaved = cost_cache.save(folder / cost_cache.BUDGET_FILE, self.key, self.verdict())
        return self.unsaved is None

    def verdict(self) -> dict:
        """What a new process starts from (JSON-ready): the schedule per load, the drafter's recent seconds and the
        typical node values (what `Budget._clearly_loses` asks before a drafter pass)."""
        schedule = {str(rows): list(s) for rows, s in self.schedule.items()}
        return {"schedule": schedule, "draft_seconds": self.draft_seconds[-KEPT:], "typical": self.typical[:KEPT]}

    def restore(self, verdict: dict) -> None:
        """Start from a saved verdict (as `clean_verdict` returns it)."""
        self.schedule = {int(r): list(s) for r, s in verdict.get("schedule", {}).items()}
        self.draft_seconds = list(verdict.get("draft_seconds", []))
        self.typical = list(verdict.get("typical", []))

    def reset(self) -> None:
        """Forget the acceptance counts, the schedule and the drafter's seconds (the curve: `cost_model(t).reset()`)."""
        self.acceptance.reset()
        self.schedule, self.draft_seconds, self.typical = {}, [], []


def memory_of(drafter, target) -> BudgetMemory:
    """The drafter's budget memory (`drafter.budget_memory`, made on first use and kept between calls), bound to
    `target`'s cost curve on this machine (`cost_model(target)`, which `hf_specdec.cost_model` returns too); a new
    one starts from the verdict saved for this drafter and target, if any."""
    memory = getattr(drafter, "budget_memory", None)
    costs = cost_model(target)
    if not isinstance(memory, BudgetMemory):
        params = list(drafter.parameters())
        memory = BudgetMemory(costs, key=f"{costs.key}|drafter={drafter_key(drafter, params)}")
        block = getattr(getattr(drafter, "config", None), "block_size", None)
        if isinstance(block, int) and block > 1:
            memory.block = block - 1  # the anchor and block - 1 drafts
            memory.share = sum(p.numel() for p in params) / sum(p.numel() for p in target.parameters())
        folder = budget_folder(costs)
        if folder is not None:
            memory.restore(cost_cache.load(folder / cost_cache.BUDGET_FILE, memory.key, clean_verdict))
        drafter.budget_memory = memory
    memory.costs = costs
    return memory


def drafter_key(drafter, params: list | None = None) -> str:
    """What the verdict depends on beside the target's key: the drafter's weights (its name, parameter count and a
    fingerprint of 16 values of every tensor, so a retrained drafter saved under the same name starts afresh) and
    its dtype. `params`: the drafter's parameters, if already listed."""
    config = getattr(drafter, "config", None)
    name = getattr(config, "_name_or_path", "") or type(drafter).__name__
    params = list(drafter.parameters()) if params is None else params
    with torch.no_grad():  # once per memory: a strided sample of each tensor, summed on its device, one sync
        sampled = [p.reshape(-1)[:: max(1, p.numel() // 16)].float().sum() for p in params]
        fingerprint = f"{torch.stack(sampled).double().sum().item():.6e}" if sampled else "-"
    return f"{Path(name).name}|{sum(p.numel() for p in params)}|{fingerprint}|{getattr(drafter, 'dtype', '')}"


def budget_folder(costs: StepCostModel) -> Path | None:
    """The folder of the curve's cache file (None: the cache is off)."""
    path = costs.path or cache_path()
    return path.parent if path is not None else None


def clean_verdict(raw: object) -> tuple[dict, list[str]]:
    """The usable parts of a saved verdict, and what was left out: a schedule is two whole numbers from 0 to
    `cost_cache.MAX_SIZE` per row count, drafter seconds are timings (`cost_cache.valid_timing`), node values are
    numbers from 0 to 1."""
    if not isinstance(raw, dict):
        return {}, [f"the entry is a JSON {type(raw).__name__}, not a mapping"]
    verdict: dict = {}
    problems: list[str] = []
    schedule = raw.get("schedule", {})
    if isinstance(schedule, dict):
        for rows, s in schedule.items():
            whole = isinstance(s, list) and len(s) == 2 and all(cost_cache.whole_number(n, 0) is not None for n in s)
            if cost_cache.whole_number(rows) is not None and whole:
                verdict.setdefault("schedule", {})[int(rows)] = [int(n) for n in s]
            else:
                problems.append(f"schedule {rows!r}")
    else:
        problems.append("schedule")
    seconds = raw.get("draft_seconds", [])
    if isinstance(seconds, list) and all(map(cost_cache.valid_timing, seconds)):
        verdict["draft_seconds"] = [float(s) for s in seconds[-KEPT:]]
    else:
        problems.append("draft_seconds")
    typical = raw.get("typical", [])
    if isinstance(typical, list) and all(_value(v) for v in typical):
        verdict["typical"] = [float(v) for v in typical[:KEPT]]
    else:
        problems.append("typical")
    return verdict, problems


def _value(v: object) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v <= 1


__all__ = ["BudgetMemory", "clean_verdict", "drafter_key", "memory_of"]
