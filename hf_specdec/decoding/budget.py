"""The adaptive budget: how many drafted tokens each step verifies, chosen to maximise committed tokens per second.

Inputs: the step-cost model (seconds of a target forward over n fed tokens, measured here), the acceptance model
(per-depth acceptance, kept on the drafter) and the drafter's own confidence (its top-k probabilities, in the best-
first tree's path scores). Per step, for a batch of B rows whose drafts were built at their largest allowed size:

- every node gets v = estimated probability that it is accepted (`AcceptanceModel.node_values`); in a row, the N
  nodes of highest v form a subtree (a child's v never exceeds its parent's) whose expected committed tokens are
  1 + (sum of their v) (greedy verification accepts at most one child per node, so the sum is the expected
  accepted length);
- the budget picks the N (the same for all rows: they are padded to one width) maximising
  sum over rows of (1 + E_b(N)) / (cost(B rows x (1 + N)) + drafter seconds), and keeps those nodes;
- ties within measurement noise (`NOISE`) go to the larger N: on a flat curve two sizes cost the same up to the
  timer's jitter, and the larger one commits more when the acceptance model is too cautious;
- when even the best N commits fewer tokens per second than plain one-token steps (B / cost(B rows x 1)), the next
  steps are plain (no drafter pass at all) for a while, twice as long each time a probe confirms it, and one
  drafted step probes again; the drafted rate judged is the lower of the models' prediction and what the last few
  drafted steps at this load have really committed per second (their tokens over their seconds, drafter and
  bookkeeping included), so a model that is too hopeful cannot keep a losing load drafting. Those seconds include
  the passes in which the drafter first caught up (on a joining request's prompt, or on the tokens of plain steps):
  in a server every join costs such a pass, so drafting that only breaks even per step loses to plain steps once
  its catch-ups are counted (measured: at 4 requests, drafted steps at 13 tokens/s against plain steps' 12.6 made
  the run 0.94x of plain batched generate). One catch-up among a few steps that pay well does not stop them. The
  drafter's seconds per row the models use are a median of passes that did not first catch up. Before a due
  probe, and before the first drafted step at a load, the models are asked first: when they put the best drafted
  rate more than `PROBE_MARGIN` below plain steps', the step stays plain. With many rows on a compute-bound device
  this is what happens: drafting stops, or never starts.
  A batch size not seen yet starts in plain mode when a smaller one (down to half) is in it, and borrows the curve of a
  row count within a quarter of it (scaled by the rows), so a server whose load drifts does not probe and measure
  afresh at every row count.
- the one-token cost of a batch size is measured by a plain step (no drafter pass is wasted on it); sizes whose cost
  is not measured yet are verified next, in real steps (`step_cost.GRID`), so the curve is filled in by the work
  itself, but only sizes that could still pay (judged by the cheapest cost they can have, against the measured
  sizes and plain steps); none past a size that
  costs about its token count in one-token forwards (nothing larger can pay there). Such measuring steps are not
  judged: their size was not chosen to pay.

Lossless: the budget only removes nodes before verification (a subtree stays a valid draft with the exact q each
node was drawn from); what is accepted is decided by the acceptance rule alone.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..verification.tree import DraftTree
from .acceptance_model import AcceptanceModel
from .step_cost import GRID, StepCostModel

MAX_BACKOFF = 64  # plain steps between probes, at most
NOISE = 0.03  # rates this close to the best count as equal (the larger size wins)
RECENT = 5  # drafted steps whose realized tokens and seconds (their ratio decides) / drafter seconds are kept
JUDGED_AFTER = 3  # realized rates needed before they can overrule the models
PROBE_MARGIN = 0.2  # a due probe is skipped when the models put drafting this far below plain steps


@dataclass
class Budget:
    """Per-call state of the adaptive budget (the models it reads outlive the call)."""

    costs: StepCostModel
    acceptance: AcceptanceModel
    draft_seconds: float | None = None  # drafter time per row and step (default: the acceptance model's samples)
    realized: dict[int, list[tuple[int, float]]] = field(default_factory=dict)  # rows -> (committed, s), recent steps
    measuring: bool = False  # this step's size was chosen to measure the curve, not to pay
    catching_up: bool = True  # the next drafter pass first catches up (on prompts, or on tokens of plain steps)

    def __post_init__(self) -> None:
        if self.draft_seconds is None and self.acceptance.draft_seconds:
            self.draft_seconds = statistics.median_low(self.acceptance.draft_seconds)

    def drafting(self, rows: int) -> bool:
        """Whether this step runs the drafter (False: a plain one-token step); the plain/probe schedule of this
        batch size lives on the acceptance model, so it carries over between calls."""
        schedule = self.acceptance.schedule.get(rows)
        new_load = schedule is None
        if new_load:  # a heavier load than one in plain mode (up to 2x) starts in plain mode too
            near = [r for r, s in self.acceptance.schedule.items() if s[1] > 2 and rows / 2 <= r <= rows]
            backoff = self.acceptance.schedule[min(near, key=lambda r: abs(r - rows))][1] if near else 0
            schedule = self.acceptance.schedule[rows] = [backoff, max(2, backoff)]
        if not self.costs.measured(1, rows):  # the one-token cost first: a plain step measures it
            return self._plain()
        if schedule[0] > 0:
            schedule[0] -= 1
            return self._plain()
        first = new_load or rows not in self.realized  # no drafted step judged at this load yet in this call
        if (schedule[1] > 2 or first) and self._clearly_loses(rows):  # a probe, or a first try, that cannot pay
            schedule[:] = [schedule[1], min(MAX_BACKOFF, 2 * schedule[1])]
            return self._plain()
        return True

    def _plain(self) -> bool:
        self.catching_up = True  # the drafter will have this step's tokens to catch up on
        return False

    def _clearly_loses(self, rows: int) -> bool:
        """Whether the best drafted rate the models give for the drafts seen last (`AcceptanceModel.typical`) falls
        short of plain steps' by more than `PROBE_MARGIN`, the verify cost estimated with the curve's rise at the
        nearest load measured when this one has only its one-token cost. A probe would then only spend a drafter
        pass (which first catches up on every row's tokens, prompts included) to confirm it."""
        values, plain = self.acceptance.typical, self.costs.cost(1, rows)
        if not values or plain is None or self.draft_seconds is None:
            return False
        best = max(  # a size with no estimate costs at least the one-token step: the optimistic side
            rows * (1 + sum(values[:n])) / ((self.costs.estimate(1 + n, rows) or plain) + rows * self.draft_seconds)
            for n in range(len(values) + 1)
        )
        return best < (1 - PROBE_MARGIN) * rows / plain

    def choose(self, trees: list[DraftTree], rows: int) -> list[DraftTree]:
        """Keep in every row the N highest-valued nodes, N chosen for the most committed tokens per second."""
        node_values = [self.acceptance.node_values(t) for t in trees]  # per tree, in node order
        values = [sorted(v, reverse=True) for v in node_values]
        most = max((len(v) for v in values), default=0)
        explore = self._unmeasured(values, rows, most)
        self.measuring = explore is not None
        n = explore if explore is not None else self._best(values, rows, most)
        return [keep_best(tree, n, v) for tree, v in zip(trees, node_values, strict=True)]

    def observe(self, rows: int, fed: int, seconds: float, drafted: bool, draft_seconds: float) -> None:
        """Record a step's target forward (`rows` x `fed` tokens) and, after a drafted step, decide on plain mode."""
        self.costs.record(fed, seconds, rows)
        catching_up, self.catching_up = self.catching_up, self.catching_up and not drafted
        if catching_up:  # the drafter's pass included a catch-up: not what a drafted step costs it
            return
        if drafted and draft_seconds > 0 and not self.costs.pinned:  # a pinned curve decides alone
            samples = self.acceptance.draft_seconds = [
                *self.acceptance.draft_seconds[1 - RECENT :],
                draft_seconds / rows,
            ]
            self.draft_seconds = statistics.median_low(samples)

    def after_drafted_step(self, trees: list[DraftTree], rows: int, realized: tuple[int, float] | None = None) -> None:
        """Switch to plain steps when drafting loses to plain decoding: the best drafted rate the models predict for
        this step's drafts, or the rate drafted steps at this load have really achieved (`realized`: this step's
        committed tokens and seconds, drafter included; the last `RECENT` steps' tokens over their seconds),
        whichever is lower."""
        plain = self.costs.cost(1, rows)
        if self.measuring:  # a size verified to measure its cost: not a step that was meant to pay
            return
        if realized is not None and not self.costs.pinned:  # a pinned curve decides alone (real timings differ)
            self.realized[rows] = [*self.realized.get(rows, [])[1 - RECENT :], realized]
        if plain is None or any(not self.costs.measured(g, rows) for g in GRID[:2]) or not any(map(len, trees)):
            return  # nothing to judge by (no curve yet, or no room left to draft in)
        values = [sorted(self.acceptance.node_values(t), reverse=True) for t in trees]
        self.acceptance.typical = max(values, key=len)
        most = max((len(v) for v in values), default=0)
        best = self._best(values, rows, most)
        schedule = self.acceptance.schedule.setdefault(rows, [0, 2])
        drafted_rate = self._rate(values, rows, best)
        seen = self.realized.get(rows, [])
        if len(seen) >= JUDGED_AFTER:
            drafted_rate = min(drafted_rate, sum(c for c, _ in seen) / max(sum(s for _, s in seen), 1e-9))
        if drafted_rate < rows / plain:
            schedule[:] = [schedule[1], min(MAX_BACKOFF, 2 * schedule[1])]
        else:
            schedule[1] = 2

    def _unmeasured(self, values: list[list[float]], rows: int, most: int) -> int | None:
        """The smallest grid size (drafts per row) not measured yet that could still pay, if any fits. A single
        sequence also measures again a size timed by fewer than `SETTLED` steps (sizes of 1 and 2 tokens are settled
        by the plain steps' timings): one stalled step would otherwise rule that size out for good, and a one-row
        step is cheap to retry. With several rows a measuring step verifies every row's drafts at that size, which
        on a compute-bound device costs more than the stall it would correct (measured: re-measuring at 8 and 16
        rows kept the server drafting there, 0.92x and 0.76x of plain batched generate), so one timing decides.

        Measuring a size costs a real step at that size, so a size is skipped when even its cheapest possible cost
        (that of the largest measured size below it: cost only grows with size) cannot beat the best rate already
        in reach with these drafts; and none is tried past a size that costs (nearly) its token count in one-token
        forwards (the device is compute-bound there: no larger size can pay)."""
        one = self.costs.cost(1, rows) if self.costs.measured(1, rows) else None
        known = [n for n in range(most + 1) if self.costs.measured(1 + n, rows)]
        best = max((self._rate(values, rows, n) for n in known), default=0.0)  # rates of sizes already measured
        if one is not None:
            best = max(best, rows / one)  # and plain steps': a size that cannot beat them is not worth measuring
        floor = None  # cost of the largest settled size so far
        for fed in GRID:
            if fed - 1 > most:
                return None
            unsettled = rows == 1 and fed > 2 and not self.costs.settled(fed, rows)
            if not self.costs.measured(fed, rows) or unsettled:
                if floor is None:
                    return fed - 1
                committed = sum(1.0 + sum(v[: fed - 1]) for v in values)
                if committed / (floor + rows * (self.draft_seconds or 0.0)) > best:
                    return fed - 1
                continue
            floor = self.costs.cost(fed, rows)
            if one is not None and fed > 1 and floor >= 0.9 * fed * one:
                return None
        return None

    def _rate(self, values: list[list[float]], rows: int, n: int) -> float:
        cost = self.costs.cost(1 + n, rows)
        if cost is None:
            return 0.0
        committed = sum(1.0 + sum(v[:n]) for v in values)
        return committed / (cost + rows * (self.draft_seconds or 0.0))

    def _best(self, values: list[list[float]], rows: int, most: int) -> int:
        """The drafts per row with the most committed tokens per second; among sizes within `NOISE` of that rate,
        the largest."""
        rates = [self._rate(values, rows, n) for n in range(most + 1)]
        top = max(rates)
        return max(n for n, rate in enumerate(rates) if rate >= (1 - NOISE) * top)


def keep_best(tree: DraftTree, n: int, values: list[float]) -> DraftTree:
    """The subtree of `tree`'s `n` highest-valued nodes, `values` in node order (ties: the earlier node, so
    parents come first)."""
    if n >= len(tree):
        return tree
    order = sorted(range(len(tree)), key=lambda i: (-values[i], i))
    return tree.keep(order[:n])


__all__ = ["Budget", "keep_best"]
