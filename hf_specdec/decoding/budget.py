"""The adaptive budget: per step, whether the drafter runs and which drafted nodes are verified, chosen for the most
committed tokens per second on this machine; lossless (it only removes nodes before verification).

The step asks `plan = budget.plan(rows, draft)` (a plain one-token step, or the drafted trees cut to the nodes that
pay) and reports what it did with `budget.learn(record)`; what outlives the call is the drafter's `BudgetMemory`
(acceptance counts, schedule, drafter seconds, cost curve), saved with `budget.save()`. The design (inputs, memory
and lifetimes, the probe/back-off schedule, measuring steps, why it is lossless) is in docs/budget.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..verification.tree import DraftTree
from .acceptance_model import AcceptanceModel
from .budget_memory import BudgetMemory
from .step_cost import GRID

MAX_BACKOFF = 64  # plain steps between probes, at most, while drafting does not clearly lose
CLEAR_BACKOFF = 256  # plain steps between probes, at most, once drafting clearly loses (by PROBE_MARGIN)
NOISE = 0.03  # rates this close to the best count as equal (the larger size wins)
RECENT = 12  # drafted steps whose realized tokens and seconds (their ratio decides) / drafter seconds are kept
JUDGED_AFTER = 3  # realized steps needed before they overrule the models (a probe's own overrules at once)
PROBE_MARGIN = 0.2  # drafting this far below plain steps loses clearly; a probe the prior puts this far below: skipped
PRIOR = AcceptanceModel()  # no evidence: what a drafter is credited with before it is seen (never recorded into)


@dataclass
class StepPlan:
    """What one step verifies: per row, `trees[b]`, cut from `drafts[b]` (the tree as drafted)."""

    drafted: bool  # the drafter ran (False: a plain one-token step, every tree empty)
    trees: list[DraftTree]
    drafts: list[DraftTree]
    measuring: bool = False  # its size was chosen to measure the cost curve, not to pay: never judged

    @classmethod
    def plain(cls, rows: int) -> StepPlan:
        """A plain one-token step over `rows` rows (no drafter pass)."""
        empty = [DraftTree() for _ in range(rows)]
        return cls(False, empty, empty)


@dataclass
class StepRecord:
    """What one step did, as `Budget.learn` takes it."""

    plan: StepPlan  # what the step verified
    paths: list[list[int] | None]  # per row, the accepted nodes of its tree, root to leaf; None: nothing verified
    fed: int  # tokens fed per row to the one target forward (1 + the largest tree)
    verify_seconds: float  # the target forward and the acceptance (which syncs with the device)
    draft_seconds: float  # the drafter's pass and the budget's plan
    committed: int  # tokens committed over all rows
    caught_up: bool = False  # the drafter's pass first read what it had missed (a joining row's prompt, plain steps)


@dataclass
class Budget:
    """The adaptive budget of one call: `plan` each step, `learn` what it did, `save` at the end. What outlives the
    call is in `memory` (kept on the drafter); this object holds only the call's recent drafted steps."""

    memory: BudgetMemory
    draft_seconds: float | None = None  # drafter seconds per row to decide with (what-if); None: the measured median
    # rows -> recent judged drafted steps: (committed, seconds as judged, seconds with every catch-up in full)
    realized: dict[int, list[tuple[int, float, float]]] = field(default_factory=dict)
    resuming: bool = True  # no drafter pass since the call began or since a plain step: the next one catches up
    planned: set[int] = field(default_factory=set)  # loads this call has planned a step for
    # False: the drafter chooses plain steps itself from realized rates (sampled PARD blocks, `ar_choice.py`); the
    # budget only cuts each drafted tree to the nodes that pay, and never sends the call to plain steps
    plain_steps: bool = True
    # False: the drafter also chose each block's length and paid its passes (sampled base-LM chains, their own stop):
    # every drafted tree is verified whole
    cuts: bool = True

    def plan(self, rows: int, draft: Callable[[], list[DraftTree]]) -> StepPlan:
        """The step over `rows` rows: plain (no drafter pass), or `draft()`'s trees (one per row, at their largest
        allowed size), each cut to its N highest-valued nodes, N chosen for the most committed tokens per second."""
        if not self._drafting(rows):
            return StepPlan.plain(rows)
        drafts = draft()
        drafted = [t for t in drafts if len(t)]
        if not self.cuts:  # the drafter chose and paid its nodes; the lookup branch beside them is verified if it pays
            return StepPlan(True, [self._lookup_that_pays(t, rows) for t in drafts], drafts)
        if drafted and all(t.whole for t in drafted):  # lengths the drafter chose and paid for
            return StepPlan(True, drafts, drafts)
        node_values = [self.memory.acceptance.node_values(t) for t in drafts]  # per tree, in node order
        values = [sorted(v, reverse=True) for v in node_values]
        most = max((len(v) for v in values), default=0)
        explore = self._unmeasured(values, rows, most)
        n = explore if explore is not None else self._best(values, rows, most)
        for tree in drafts:  # a drafter that judges its ways of drafting by realized rates leaves such steps out
            tree.measuring = explore is not None and n < len(tree)
        trees = [tree if tree.whole else keep_best(tree, n, v) for tree, v in zip(drafts, node_values, strict=True)]
        return StepPlan(True, trees, drafts, measuring=explore is not None)

    def learn(self, record: StepRecord) -> None:
        """Count the verified trees' accepted paths, time the step's target forward (and, outside catch-ups, the
        drafter), and after a drafted step decide on plain mode."""
        plan, rows = record.plan, len(record.plan.trees)
        for tree, path in zip(plan.trees, record.paths, strict=True):
            if path is not None and not tree.whole:  # a whole tree's nodes are not the ones the models value
                self.memory.acceptance.record(tree, path)
        costs, memory = self.memory.costs, self.memory
        costs.record(record.fed, record.verify_seconds, rows)
        drafter = record.draft_seconds
        whole = plan.drafted and all(t.whole for t in plan.trees if len(t)) and any(map(len, plan.trees))
        # the drafter seconds the models add to a cut tree's step: not those of a chain that paid a pass per draft,
        # nor of a step with no room left to draft (no drafter pass ran: its microseconds are no drafter's cost)
        ran = any(map(len, plan.drafts))
        timed = plan.drafted and ran and not whole and not record.caught_up and drafter > 0
        if timed and not costs.pinned:  # a pinned curve decides alone
            memory.draft_seconds = [*memory.draft_seconds[1 - RECENT :], drafter / rows]
        if plan.drafted:
            full = drafter + record.verify_seconds
            judged = full
            if record.caught_up and self.resuming and self.drafter_seconds is not None:
                # what it read of the prompt or of plain steps' tokens is spent whatever comes next: drafting on
                # pays the drafter's usual seconds (a join's catch-up, between drafted steps, counts in full)
                judged = min(drafter, rows * self.drafter_seconds) + record.verify_seconds
            if self.plain_steps:
                self._judge(plan, rows, (record.committed, judged, full))
        self.resuming = not plan.drafted

    def save(self) -> bool:
        """The memory's one explicit save (the cost curve to the cache file; never raises for the file)."""
        return self.memory.save()

    @property
    def drafter_seconds(self) -> float | None:
        """The drafter's seconds per row and step the models use: `draft_seconds` if given, else the memory's
        median of drafted steps that did not first catch up."""
        return self.draft_seconds if self.draft_seconds is not None else self.memory.drafter_seconds

    def _drafting(self, rows: int) -> bool:
        """Whether this step runs the drafter (False: a plain one-token step); the plain/probe schedule of this
        batch size lives in the memory, so it carries over between calls. A call whose load is known to lose
        clearly (its back-off past `MAX_BACKOFF`) still tries its first step: new text may draft well, and the
        first step is where a try costs least (the drafter reads the prompt only) and a win pays for the most."""
        memory, costs = self.memory, self.memory.costs
        if not self.plain_steps:  # the drafter's choice decides; a plain step first measures the one-token cost
            return costs.measured(1, rows)
        schedule = memory.schedule.get(rows)
        new_load = schedule is None
        if new_load:  # a heavier load than one in plain mode (up to 2x) starts in plain mode too
            near = [r for r, s in memory.schedule.items() if s[1] > 2 and rows / 2 <= r <= rows]
            backoff = memory.schedule[min(near, key=lambda r: abs(r - rows))][1] if near else 0
            schedule = memory.schedule[rows] = [backoff, max(2, backoff)]
        elif rows not in self.planned and schedule[1] > MAX_BACKOFF:
            schedule[0] = 0
        self.planned.add(rows)
        if not costs.measured(1, rows):  # the one-token cost first: a plain step measures it
            return False
        if schedule[0] > 0:
            schedule[0] -= 1
            return False
        first = new_load or rows not in self.realized  # no drafted step judged at this load yet in this call
        due = schedule[1] > 2 or first  # a probe, or a first try: asked first whether it could pay
        if due and (self._clearly_loses(rows) or self._cannot_pay_untimed(rows)):
            schedule[:] = [schedule[1], min(MAX_BACKOFF, 2 * schedule[1])]
            return False
        return True

    def _clearly_loses(self, rows: int) -> bool:
        """Whether even a drafter credited with the acceptance model's prior (`BudgetMemory.typical`: the drafts
        judged last, each node valued by the prior or by the drafter's record, whichever is higher) falls short of
        plain steps' rate by more than
        `PROBE_MARGIN`, the verify cost estimated with the curve's rise at the nearest load measured when this one
        has only its one-token cost: the load cannot pay whatever the text (many rows on a compute-bound device),
        and a probe would only spend a drafter pass (which first catches up on every row's tokens, prompts
        included) to confirm it. Where it is the acceptance on this text that loses, probes go on (text changes);
        how often is the back-off's business (`_judge`)."""
        costs, seconds = self.memory.costs, self.drafter_seconds
        values, plain = self.memory.typical, costs.cost(1, rows)
        if not values or plain is None or seconds is None:
            return False
        best = max(  # a size with no estimate costs at least the one-token step: the optimistic side
            rows * (1 + sum(values[:n])) / ((costs.estimate(1 + n, rows) or plain) + rows * seconds)
            for n in range(len(values) + 1)
        )
        return best < (1 - PROBE_MARGIN) * rows / plain

    def _cannot_pay_untimed(self, rows: int) -> bool:
        """Before the drafter was ever timed with this target (no seconds measured, none saved): whether even a
        drafter whose every draft is kept, a chain of the `block` drafts one pass proposes, beats plain steps' rate
        by less than `PROBE_MARGIN`, its pass priced at the target's cost for that block times the drafter's
        `share` of the parameters (0.35 for the 0.5B PARD drafter of the 1.5B; its measured pass cost 0.33x of the
        target's on an AVX2 EPYC). A real drafter keeps far fewer, and a first try also reads the whole prompt
        through the drafter (on that machine 2.2-3 s, 10-15 plain steps, where a drafter always right only ties
        plain steps): such a try cannot pay."""
        memory, costs = self.memory, self.memory.costs
        if self.drafter_seconds is not None or memory.share is None or not memory.block:
            return False
        plain, block = costs.cost(1, rows), costs.estimate(1 + memory.block, rows)
        if plain is None or block is None or not costs.measured(1 + memory.block, rows):
            return False
        return rows * (1 + memory.block) / (block * (1 + memory.share)) < (1 + PROBE_MARGIN) * rows / plain

    def _judge(self, plan: StepPlan, rows: int, realized: tuple[int, float, float]) -> None:
        """After a drafted step, switch to plain steps when drafting loses to plain decoding: the best drafted rate
        the models predict for this step's drafts, or the rate drafted steps at this load have really achieved in
        this call (`realized`: this step's committed tokens, its seconds as judged and in full; the last `RECENT`
        steps' tokens over their seconds), whichever is lower. The realized rate overrules once `JUDGED_AFTER`
        steps are in; a probe (a drafted step while the back-off is above 2) is judged by the realized rate alone,
        from its first step. A loss doubles the back-off, up to `CLEAR_BACKOFF` where drafting clearly loses (this
        call's steps, catch-ups included, commit `PROBE_MARGIN` less per second than plain steps: two steps tell, one
        when the load already lost clearly; where the models agree, straight to half of `CLEAR_BACKOFF`),
        else up to `MAX_BACKOFF`; drafting that pays halves it, once `JUDGED_AFTER` realized steps say so."""
        costs, memory = self.memory.costs, self.memory
        plain = costs.cost(1, rows)
        if plan.measuring or not any(map(len, plan.drafts)):  # a size verified to measure its cost, or no room left
            return
        if not costs.pinned:  # a pinned curve decides alone (real timings differ)
            self.realized[rows] = [*self.realized.get(rows, [])[1 - RECENT :], realized]
        trees = plan.drafts
        if plain is None or any(not costs.measured(g, rows) for g in GRID[:2]):
            return  # nothing to judge by (no curve yet)
        schedule = memory.schedule.setdefault(rows, [0, 2])
        plain_rate = rows / plain
        seen = self.realized.get(rows, [])
        if all(t.whole for t in trees if len(t)):  # chains whose lengths the drafter chose: realized rates judge
            if len(seen) < JUDGED_AFTER and not (seen and schedule[1] > 2):
                return
            modelled = _per_second(seen, 1)
        else:
            values = [sorted(memory.acceptance.node_values(t), reverse=True) for t in trees]
            largest = max(trees, key=len)  # each node as the more hopeful of the prior and the drafter's record
            hopeful = map(max, PRIOR.node_values(largest), memory.acceptance.node_values(largest))
            memory.typical = sorted(hopeful, reverse=True)
            most = max((len(v) for v in values), default=0)
            modelled = self._rate(values, rows, self._best(values, rows, most))
        drafted_rate = modelled
        if seen and schedule[1] > 2:  # a probe: what drafting really achieved here decides, from its first step
            drafted_rate = _per_second(seen, 1)
        elif len(seen) >= JUDGED_AFTER:
            drafted_rate = min(drafted_rate, _per_second(seen, 1))
        if drafted_rate < plain_rate:
            told = len(seen) >= 2 or (len(seen) == 1 and schedule[1] > MAX_BACKOFF)
            clearly = told and _per_second(seen, 2) < (1 - PROBE_MARGIN) * plain_rate
            cap = CLEAR_BACKOFF if clearly else MAX_BACKOFF
            sure = clearly and modelled < (1 - PROBE_MARGIN) * plain_rate  # the models agree: no ladder of probes
            run = max(schedule[1], CLEAR_BACKOFF // 2) if sure else schedule[1]
            schedule[:] = [min(cap, run), min(cap, 2 * run)]
        elif len(seen) >= JUDGED_AFTER:
            schedule[1] = max(2, schedule[1] // 2)

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
        one = self.memory.costs.cost(1, rows) if self.memory.costs.measured(1, rows) else None
        known = [n for n in range(most + 1) if self.memory.costs.measured(1 + n, rows)]
        best = max((self._rate(values, rows, n) for n in known), default=0.0)  # rates of sizes already measured
        if one is not None:
            best = max(best, rows / one)  # and plain steps': a size that cannot beat them is not worth measuring
        floor = None  # cost of the largest settled size so far
        for fed in GRID:
            if fed - 1 > most:
                return None
            unsettled = rows == 1 and fed > 2 and not self.memory.costs.settled(fed, rows)
            if not self.memory.costs.measured(fed, rows) or unsettled:
                if floor is None:
                    return fed - 1
                committed = sum(1.0 + sum(v[: fed - 1]) for v in values)
                if committed / (floor + rows * (self.drafter_seconds or 0.0)) > best:
                    return fed - 1
                continue
            floor = self.memory.costs.cost(fed, rows)
            if one is not None and fed > 1 and floor >= 0.9 * fed * one:
                return None
        return None

    def _lookup_that_pays(self, tree: DraftTree, rows: int) -> DraftTree:
        """`tree` with its drafter's nodes whole and, of the nodes only the prompt-lookup branch proposed, the m most
        likely accepted for the m whose step commits the most tokens per second of verify; these nodes cost no
        drafter pass, only verified width, which on a machine whose cost rises with every token fed (a CPU without
        bf16 or int8 matrix units) costs more than they commit: an 11-token lookup branch beside a "plain" choice cost
        8x a one-token step there and committed 1 token. The whole tree while the curve is unmeasured."""
        lookup = [i for i in range(len(tree)) if tree.from_lookup(i)]
        costs = self.memory.costs
        if not lookup or costs.cost(1, rows) is None:
            return tree
        values = self.memory.acceptance.node_values(tree)
        own = [i for i in range(len(tree)) if not tree.from_lookup(i)]
        lookup.sort(key=lambda i: (-values[i], i))  # a copied span's nodes descend along it: parents come first
        committed = 1.0 + sum(values[i] for i in own)
        best, keep = 0.0, 0
        for m in range(len(lookup) + 1):
            rate = (committed + sum(values[i] for i in lookup[:m])) / costs.cost(1 + len(own) + m, rows)
            if rate > best:
                best, keep = rate, m
        return tree if keep == len(lookup) else tree.keep(own + lookup[:keep])

    def _rate(self, values: list[list[float]], rows: int, n: int) -> float:
        cost = self.memory.costs.cost(1 + n, rows)
        if cost is None:
            return 0.0
        committed = sum(1.0 + sum(v[:n]) for v in values)
        return committed / (cost + rows * (self.drafter_seconds or 0.0))

    def _best(self, values: list[list[float]], rows: int, most: int) -> int:
        """The drafts per row with the most committed tokens per second; among sizes within `NOISE` of that rate,
        the largest."""
        rates = [self._rate(values, rows, n) for n in range(most + 1)]
        top = max(rates)
        return max(n for n, rate in enumerate(rates) if rate >= (1 - NOISE) * top)


def _per_second(steps: list[tuple[int, float, float]], seconds: int) -> float:
    """Tokens committed per second over `steps`, their seconds taken from field `seconds` (1: as judged, 2: in full)."""
    return sum(s[0] for s in steps) / max(sum(s[seconds] for s in steps), 1e-9)


def keep_best(tree: DraftTree, n: int, values: list[float]) -> DraftTree:
    """The subtree of `tree`'s `n` highest-valued nodes, `values` in node order (ties: the earlier node, so
    parents come first)."""
    if n >= len(tree):
        return tree
    order = sorted(range(len(tree)), key=lambda i: (-values[i], i))
    return tree.keep(order[:n])


class FixedBudget:
    """The settings' fixed sizes (`DecodingSettings(budget="fixed")`): every step drafts and verifies its whole trees;
    nothing is learned or saved."""

    def plan(self, rows: int, draft: Callable[[], list[DraftTree]]) -> StepPlan:
        drafts = draft()
        return StepPlan(True, drafts, drafts)

    def learn(self, record: StepRecord) -> None:
        pass

    def save(self) -> bool:
        return False


__all__ = ["Budget", "FixedBudget", "StepPlan", "StepRecord", "keep_best"]
