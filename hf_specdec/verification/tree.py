"""Draft token trees, and the mask and positions that verify every node in one target forward.

A tree hangs off the root, the anchor (the last committed token, not yet seen by the target). Node i holds a
draft token and its parent (-1 = root). The target runs once over `[root, node_0 .. node_{N-1}]`: row 0 is the
root, row i + 1 is node i. Each row attends to the committed prefix, its ancestors and itself (SpecInfer,
Miao et al. 2024; Medusa, Cai et al. 2024), at position `prefix_len + depth`.

Greedy trees are built best-first under a node budget from the drafter's per-position top-k (DDTree,
Ringel & Romano 2026): since a block drafter scores every position independently, a path's score is the sum of
its per-position log-probabilities, and best-first expansion yields the `budget` highest-scoring prefixes.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import torch


@dataclass
class DraftTree:
    """Draft nodes in the order the target sees them (parents before children).

    Attributes:
        tokens: token id of each node.
        parents: parent node of each node; -1 for children of the root.
        q_of: for sampled nodes, the row of `q` the node was drawn from; -1 for deterministic nodes (argmax or
            prompt lookup), whose proposal distribution is one-hot on the token.
        q: (G, V) float32 probabilities the sampled nodes were drawn from, or None.
        logq: for nodes of a best-first tree, the drafter's log-probability of the path to the node (the sum of its
            per-depth log q); None for other nodes (prompt lookup, samples). The adaptive budget reads it.
        lookup: True for nodes that only the prompt-lookup branch proposed.
        copied: True for nodes the drafter and the prompt-lookup branch both proposed (merged in a greedy trie).
        copying: the row's previous step accepted a node the prompt-lookup branch proposed (it is copying a span);
            the adaptive budget values this tree's lookup nodes from that regime's acceptance.
        measuring: the adaptive budget verified this tree cut to a size it is measuring (the step-cost curve), not
            the size that pays: what its step realized says little of the way it was drafted.
        whole: the drafter chose this tree's length itself and paid a pass per draft (a greedy base-LM chain): the
            adaptive budget verifies it whole and keeps it out of its acceptance counts.
    """

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    q_of: list[int] = field(default_factory=list)
    q: torch.Tensor | None = None
    logq: list[float | None] = field(default_factory=list)
    lookup: list[bool] = field(default_factory=list)
    copied: list[bool] = field(default_factory=list)
    copying: bool = False
    measuring: bool = False
    whole: bool = False

    def __len__(self) -> int:
        return len(self.tokens)

    def add(
        self,
        token: int,
        parent: int,
        q_row: int = -1,
        logq: float | None = None,
        lookup: bool = False,
        copied: bool = False,
    ) -> int:
        self.tokens.append(int(token))
        self.parents.append(int(parent))
        self.q_of.append(int(q_row))
        self.logq.append(logq)
        self.lookup.append(lookup)
        self.copied.append(copied)
        return len(self.tokens) - 1

    def from_lookup(self, node: int) -> bool:
        """Whether the prompt-lookup branch proposed `node` (alone or with the drafter)."""
        return self.lookup[node] or self.copied[node]

    def keep(self, nodes: list[int]) -> DraftTree:
        """The subtree of `nodes` (every node's parent among them), renumbered in their order, parents first."""
        index = {-1: -1}
        out = DraftTree(q=self.q, copying=self.copying)
        for i in sorted(nodes):
            parent = index[self.parents[i]]
            index[i] = out.add(self.tokens[i], parent, self.q_of[i], self.logq[i], self.lookup[i], self.copied[i])
        return out

    def children(self) -> list[list[int]]:
        """children[r] for each row r (0 = root, i + 1 = node i), listed as node indices in insertion order."""
        kids: list[list[int]] = [[] for _ in range(len(self) + 1)]
        for i, p in enumerate(self.parents):
            kids[p + 1].append(i)
        return kids

    def depths(self) -> list[int]:
        """Depth of each node (children of the root have depth 1)."""
        depth: list[int] = []
        for p in self.parents:
            depth.append(1 if p < 0 else depth[p] + 1)
        return depth

    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))

    def path_to(self, node: int) -> list[int]:
        """Nodes from the root's child down to `node` (inclusive)."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    @classmethod
    def sampled_chain(cls, draws: list[list[int]], q: torch.Tensor) -> DraftTree:
        """A chain of sampled drafts with siblings: draws[d] are i.i.d. draws from q[d] at depth d + 1; the first
        continues the chain, the others are leaves beside it."""
        tree = cls(q=q)
        trunk = -1
        for d, row in enumerate(draws):
            first = tree.add(row[0], trunk, q_row=d)
            for token in row[1:]:
                tree.add(token, trunk, q_row=d)
            trunk = first
        return tree

    def add_chain(self, tokens: list[int], merge: bool) -> None:
        """Hang a chain of deterministic tokens off the root; with `merge`, share nodes already in the tree (a trie).

        Merging is right for greedy verification (siblings with equal tokens are redundant). Sampling keeps the
        chain separate: each child is tried with its own proposal distribution.
        """
        parent = -1
        kids = self.children() if merge else None
        for token in tokens:
            existing = None
            if merge:
                existing = next((c for c in kids[parent + 1] if self.tokens[c] == token), None)
            if existing is None:
                existing = self.add(token, parent, lookup=True)
                if merge:
                    kids.append([])
                    kids[parent + 1].append(existing)
            elif not self.lookup[existing]:
                self.copied[existing] = True
            parent = existing


def best_first_tree(top_logq: list[list[float]], top_ids: list[list[int]], budget: int) -> DraftTree:
    """DDTree best-first construction: the `budget` highest-scoring prefixes of the per-depth candidates.

    Args:
        top_logq: top_logq[d][r] = log q_d of the rank-r candidate at depth d + 1, sorted descending per depth.
        top_ids: the matching token ids.
        budget: number of draft nodes.
    """
    return conditional_best_first_tree([[row] for row in top_logq], [[row] for row in top_ids], None, budget)


def conditional_best_first_tree(
    top_logq: list[list[list[float]]],
    top_ids: list[list[list[int]]],
    top_next: list[list[list[int]]] | None,
    budget: int,
) -> DraftTree:
    """Best-first tree when a node's candidates depend on its parent's choice (DDTree generalised to a walk).

    Args:
        top_logq: top_logq[d][c][r] = log q of the rank-r candidate at depth d + 1 given the parent's choice c
            (c = 0 for children of the root), sorted descending in r.
        top_ids: the matching token ids.
        top_next: the choice index a rank-r child passes to its own children (None: always 0, i.e. the depths are
            independent, as for a plain block drafter).
        budget: number of draft nodes.
    A node's score is the sum of its path's log-probabilities, so a child never outscores its parent and a lower
    rank never outscores a higher one: popping a max-heap that holds each popped node's first child and next
    sibling yields the highest-scoring prefixes in order, parents first.
    """
    tree = DraftTree()
    depth_count = len(top_ids)
    if budget <= 0 or depth_count == 0 or not top_ids[0][0]:
        return tree
    # heap entries: (-score, tie-break counter, parent node, depth index, parent choice, rank, parent score)
    heap = [(-top_logq[0][0][0], 0, -1, 0, 0, 0, 0.0)]
    counter = 1
    while heap and len(tree) < budget:
        neg, _, parent, d, choice, r, parent_score = heapq.heappop(heap)
        node = tree.add(top_ids[d][choice][r], parent, logq=-neg)
        if r + 1 < len(top_ids[d][choice]):  # next sibling
            sibling = -(parent_score + top_logq[d][choice][r + 1])
            heapq.heappush(heap, (sibling, counter, parent, d, choice, r + 1, parent_score))
            counter += 1
        if d + 1 < depth_count:  # first child
            nxt = 0 if top_next is None else top_next[d][choice][r]
            heapq.heappush(heap, (-(-neg + top_logq[d + 1][nxt][0]), counter, node, d + 1, nxt, 0, -neg))
            counter += 1
    return tree


def visibility_rows(tree: DraftTree, n: int | None = None) -> list[list[bool]]:
    """(n, n) as host lists (n defaults to N + 1): row r (0 = root, i + 1 = node i) sees the root, its ancestors and
    itself; rows past the tree (padding) see only themselves. Built in Python, turned into a tensor once: per-node
    tensor writes would cost one small op each."""
    size = len(tree) + 1
    n = size if n is None else n
    rows = [[False] * n for _ in range(n)]
    rows[0][0] = True
    for i, p in enumerate(tree.parents):
        rows[i + 1] = rows[p + 1].copy()
        rows[i + 1][i + 1] = True
    for r in range(size, n):
        rows[r][r] = True
    return rows


def tree_attention_mask(
    tree: DraftTree, prefix_len: int, dtype: torch.dtype, device: torch.device, boolean: bool
) -> torch.Tensor:
    """(1, 1, N + 1, prefix_len + N + 1) mask for `[root, nodes]` after `prefix_len` cached tokens.

    `boolean=True` gives True = attend (SDPA); otherwise an additive float mask (0 keep, dtype min block), which
    eager attention needs (a bool mask there is silently wrong).
    """
    n = len(tree) + 1
    allowed = torch.tensor(visibility_rows(tree), dtype=torch.bool)  # (N + 1, N + 1) row attends to column
    allowed = torch.cat([torch.ones(n, prefix_len, dtype=torch.bool), allowed], dim=1)[None, None].to(device)
    if boolean:
        return allowed
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)


def mask_for_attention(allowed: torch.Tensor, implementation: str, dtype: torch.dtype):
    """A bool visibility matrix (True = attend), (Q, KV) for every row or (B, Q, KV) per row, as the mask
    `implementation` takes.

    sdpa: (B or 1, 1, Q, KV) bool; eager: additive float (a bool mask there is silently wrong); flex_attention: a
    BlockMask. Anything else cannot take an arbitrary mask: a clear error.
    """
    per_row = allowed if allowed.dim() == 3 else allowed[None]  # (B, Q, KV)
    if implementation == "sdpa":
        return per_row[:, None]
    if implementation == "eager":
        mask = torch.zeros(per_row.shape, dtype=dtype, device=allowed.device)
        return mask.masked_fill_(~per_row, torch.finfo(dtype).min)[:, None]
    if implementation == "flex_attention":
        from torch.nn.attention.flex_attention import create_block_mask

        batch, q_len, kv_len = per_row.shape
        return create_block_mask(
            lambda b, h, q, kv: per_row[b, q, kv],
            B=batch,
            H=None,
            Q_LEN=q_len,
            KV_LEN=kv_len,
            device=allowed.device,
        )
    raise ValueError(
        f"tree-masked and batched target passes need an attention implementation that takes a custom per-row mask "
        f"(sdpa, eager or flex_attention); the target uses {implementation!r}. Load it with "
        "attn_implementation='sdpa', or decode one unbatched chain."
    )


def tree_position_ids(tree: DraftTree, root_position: int, device: torch.device) -> torch.Tensor:
    """(1, N + 1) positions: the root at `root_position`, each node at root_position + depth."""
    return torch.tensor([[root_position] + [root_position + d for d in tree.depths()]], device=device)


__all__ = [
    "DraftTree",
    "best_first_tree",
    "conditional_best_first_tree",
    "mask_for_attention",
    "tree_attention_mask",
    "tree_position_ids",
    "visibility_rows",
]
