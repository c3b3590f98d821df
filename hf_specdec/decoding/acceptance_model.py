"""The acceptance model: how often a drafter's nodes are accepted, per depth, learned online from real steps.

For every verified tree it counts, per depth d, the nodes whose parent was accepted ("tried" at d) and those that
were accepted, separately for the drafter's best-first nodes, its sampled nodes and prompt-lookup nodes (those of
rows whose previous step accepted a lookup node, which are copying a span, apart from the others: a copy run is
bursty, so its next node is far likelier accepted than a fresh lookup's). For
best-first nodes it also sums the drafter's own conditional probability q of each tried node, so that
c_d = accepted / sum of q calibrates the drafter's confidence at depth d: the chance that a tried node is accepted is
estimated as min(1, c_d * q_node) (the drafter's top-k probabilities, corrected by what it achieved). Sampled nodes
carry no confidence and use the per-depth rate accepted / tried.

A lookup branch is a span copied from the context: once its first node is right, the next is right as long as
the copy goes on, about equally likely at any depth. So a lookup node whose parent the lookup branch proposed too
(a continuation, sources "lookup+" / "copying+") is counted in one table pooled over depths, with one prior
pseudo-node for all of them; only a branch's first node (its start) is counted per depth. Per-depth rates with a
prior at every depth would value the tenth node of a copy that has always been accepted whole at about 0.7^9
before the evidence reaches that depth, and evidence never reaches a depth the budget does not verify.

A node's chance is estimated given its parent; siblings share one position (at most one of them is accepted), so
their chances are capped to sum to 1, a copy's node first on a copying step (`siblings_share`): beside a copy that
goes on, a drafted sibling is worth the chance that the copy breaks there. A node both the drafter and the copy
proposed (merged in a greedy trie) is counted as the drafter's and valued by the likelier of the two estimates. The
lookup tables count only nodes the copy alone proposed: where the drafter agrees the node is far likelier right,
and counting those too made the tables value the copy's nodes where the drafter disagrees, the only ones they
value alone, by the agreeing ones' rate (measured on 5 GSM8K and 5 MT-Bench prompts: the copy's starts beside a
drafted node were valued at ~0.2 and none of 33 was accepted, and steps with a lookup branch were predicted to
commit 21-25% more than they did; counting only the copy's own nodes, MT-Bench's were predicted at 86 tokens and
committed 88).

Counts start from a weak prior (one pseudo-node per depth) and decay (old verified trees weigh less), so the model
follows a call whose text changes; it is part of the drafter's `BudgetMemory` (`budget_memory.py`), kept between
calls. Only a verified draft is evidence: a plain step (an empty tree) leaves the counts as they are. Were they to
decay there too, a run of plain steps would fade what the drafter was seen to achieve back to the prior, a drafter
that loses would look as good as a new one whenever a probe is due, and a probe judged by the models would resume
drafting that loses.

A depth the budget never verified borrows the counts of the deepest shallower depth that has some, for the
calibration as for the rates: at a depth with no evidence the calibration would be 1 (the drafter's confidence
taken at its word), and a confident drafter that is mostly wrong would have its deep nodes valued at its own
confidence (a chain drafted at q = 0.8 whose depth-1 nodes are accepted 20% of the time would be valued at 1.8
committed tokens a step; with depth 1's calibration carried down it is valued at 1.25).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..verification.tree import DraftTree

DECAY = 0.98  # weight of the past per verified (non-empty) tree
# before any evidence, per depth; "copying": lookup nodes of a row whose previous step accepted a lookup node;
# "+": a lookup node under a node the lookup branch proposed (a copy going on), pooled over depths
PRIOR_RATE = {"drafted": 0.5, "sampled": 0.5, "lookup": 0.3, "copying": 0.7, "lookup+": 0.8, "copying+": 0.8}


@dataclass
class DepthCounts:
    tried: float = 0.0
    accepted: float = 0.0
    expected: float = 0.0  # sum of the drafter's q over tried best-first nodes


@dataclass
class AcceptanceModel:
    """Per-depth acceptance counts for each node source (the keys of `PRIOR_RATE`)."""

    counts: dict[str, dict[int, DepthCounts]] = field(default_factory=lambda: {k: {} for k in PRIOR_RATE})

    def record(self, tree: DraftTree, path: list[int]) -> None:
        """Count a verified tree whose accepted nodes (root to leaf) are `path`; an empty tree (a plain step) is no
        evidence and changes nothing."""
        if not len(tree):
            return
        for table in self.counts.values():
            for c in table.values():
                c.tried, c.accepted, c.expected = c.tried * DECAY, c.accepted * DECAY, c.expected * DECAY
        accepted = set(path)
        depths = tree.depths()
        for i, parent in enumerate(tree.parents):
            if parent >= 0 and parent not in accepted:
                continue
            c = self.counts[source(tree, i)].setdefault(depths[i], DepthCounts())
            c.tried += 1
            c.accepted += i in accepted
            q = conditional_q(tree, i)
            if q is not None:
                c.expected += q

    def rate(self, kind: str, depth: int) -> float:
        """Accepted / tried at `depth` for nodes of `kind`, with one prior pseudo-node; for a lookup continuation
        ("+" kinds) accepted / tried over all depths, one prior pseudo-node in all. A depth with no evidence yet
        (under one node tried) takes the rate of the deepest shallower depth that has some: nodes the budget never
        verified would otherwise keep the prior forever and, valued by it, never be verified."""
        table = self.counts[kind]
        if kind.endswith("+"):
            tried, accepted = sum(c.tried for c in table.values()), sum(c.accepted for c in table.values())
            return (accepted + PRIOR_RATE[kind]) / (tried + 1.0)
        c = _evidence(table, depth)
        return (c.accepted + PRIOR_RATE[kind]) / (c.tried + 1.0)

    def calibration(self, depth: int) -> float:
        """c_d: accepted best-first nodes per unit of the drafter's q at `depth` (1 = the drafter is calibrated); a
        depth with no evidence yet takes the deepest shallower depth's, as `rate` does."""
        c = _evidence(self.counts["drafted"], depth)
        return (c.accepted + 1.0) / (c.expected + 1.0)

    def node_values(self, tree: DraftTree) -> list[float]:
        """Estimated probability that each node is accepted (its path is): a product down the path of each node's
        chance given its parent, min(1, c_d * q) for best-first nodes and the rate of its source for the others,
        shared among siblings (`siblings_share`; in a row copying a span, its lookup nodes first). Never above the
        parent's."""
        depths = tree.depths()
        given_parent = [0.0] * len(tree)
        for i in range(len(tree)):
            kind, q = source(tree, i), conditional_q(tree, i)
            given_parent[i] = self.rate(kind, depths[i]) if q is None else min(1.0, self.calibration(depths[i]) * q)
            if tree.copied[i]:  # the copy proposed it too: the likelier of the two estimates
                given_parent[i] = max(given_parent[i], self.rate(lookup_source(tree, i), depths[i]))
        first = [tree.copying and tree.from_lookup(i) for i in range(len(tree))]
        given_parent = siblings_share(tree.parents, given_parent, first)
        values: list[float] = []
        for i, parent in enumerate(tree.parents):
            values.append((1.0 if parent < 0 else values[parent]) * given_parent[i])
        return values

    def reset(self) -> None:
        self.counts = {k: {} for k in PRIOR_RATE}


def _evidence(table: dict[int, DepthCounts], depth: int) -> DepthCounts:
    """The counts at `depth`, or, under one node tried there, those of the deepest shallower depth that has one."""
    c = table.get(depth)
    if c is None or c.tried < 1.0:
        known = [d for d, x in table.items() if d < depth and x.tried >= 1.0]
        c = table[max(known)] if known else (c or DepthCounts())
    return c


def siblings_share(parents: list[int], given_parent: list[float], first: list[bool]) -> list[float]:
    """At most one child of a node is accepted (each position commits one token), so the children's chances given
    their parent sum to at most 1: children marked `first` (a copy's lookup nodes), then the likeliest, keep their
    own chance, each next one at most what those before it leave. A copy going on (a lookup node at 0.9) leaves a
    drafted sibling 0.1, the chance that the copy breaks there, instead of the drafter's own confidence, which
    counted as if the copy were not there."""
    shared = list(given_parent)
    children: dict[int, list[int]] = {}
    for i, parent in enumerate(parents):
        children.setdefault(parent, []).append(i)
    for kids in children.values():
        left = 1.0
        for i in sorted(kids, key=lambda k: (not first[k], -given_parent[k], k)):
            shared[i] = min(given_parent[i], left)
            left = max(0.0, left - shared[i])
    return shared


def source(tree: DraftTree, node: int) -> str:
    """Which table counts `node`: "drafted", "sampled", or for a node only the lookup branch proposed its
    `lookup_source`."""
    if tree.lookup[node]:
        return lookup_source(tree, node)
    return "sampled" if tree.q_of[node] >= 0 else "drafted"


def lookup_source(tree: DraftTree, node: int) -> str:
    """The table of a node the lookup branch proposed: "lookup" / "copying" (the row's previous step accepted a
    lookup node) for a branch's first node, with "+" for a node under another node the lookup branch proposed."""
    parent = tree.parents[node]
    going_on = "+" if parent >= 0 and tree.from_lookup(parent) else ""
    return ("copying" if tree.copying else "lookup") + going_on


def conditional_q(tree: DraftTree, node: int) -> float | None:
    """The drafter's q of `node` given its parent, from best-first path scores; None where unknown."""
    logq = tree.logq[node]
    if logq is None or tree.lookup[node]:
        return None
    parent = tree.parents[node]
    base = 0.0 if parent < 0 else tree.logq[parent]
    return None if base is None else math.exp(logq - base)


__all__ = ["AcceptanceModel", "conditional_q", "lookup_source", "siblings_share", "source"]
