"""Proposal trees for tree-packed on-policy distillation (SpecOPD, docs/specopd.md section 2), as pure tensor functions.

At n anchors of a trunk (a target-written sequence), the drafter proposes M branches of k tokens each. Branches
of one anchor that share a prefix share its nodes (a trie), so the target scores every distinct proposal state
once. One cache-less target forward runs over `[trunk | nodes]`:

- trunk rows are causal among themselves;
- the node of depth d on a branch from anchor a sits at position a + 1 + d and sees the trunk up to a plus its
  own ancestors and itself (AngelSpec's branch predicate generalised to tries, as DDTree's ancestor masks);
- the teacher p of drafted token s of a branch is read at its predecessor: trunk row a for s = 0, the node of
  depth s - 1 on that branch otherwise.

Only nodes of depth 0..k-2 enter the forward: a leaf's own logits would score the token after the block.

Letters: n anchors, M branches per anchor, k drafted tokens per branch, N distinct nodes, T trunk rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def first_equal_branch(tokens: torch.LongTensor) -> torch.LongTensor:
    """(n, M, k) index of the first branch of the same anchor with the same tokens up to and including depth d.

    A node (anchor, branch m, depth d) is distinct exactly where the result equals m.
    """
    same = tokens[:, :, None, :] == tokens[:, None, :, :]  # (n, M, M, k)
    same_prefix = same.long().cumprod(dim=-1).bool()  # (n, M, M, k)
    return same_prefix.long().argmax(dim=2)  # (n, M, k): first True along the other-branch axis


@dataclass
class ProposalTrees:
    """One packed target pass over a trunk and the anchors' tries."""

    input_ids: torch.LongTensor  # (T + N,) trunk tokens then node tokens
    position_ids: torch.LongTensor  # (T + N,)
    allowed: torch.Tensor  # (T + N, T + N) bool, row attends to column
    teacher_rows: torch.LongTensor  # (n, M, k) row of the forward whose next-token distribution is p of that token
    distinct: torch.Tensor  # (n, M, k) bool, True on the first branch holding each distinct node
    num_nodes: int  # N

    @property
    def supervised(self) -> int:
        """Distinct (proposal state, token) pairs that get a teacher distribution."""
        return int(self.distinct.sum())


def pack_proposal_trees(trunk: torch.LongTensor, anchors: torch.LongTensor, tokens: torch.LongTensor) -> ProposalTrees:
    """Pack `trunk` (T,) and branches `tokens` (n, M, k) hanging off `anchors` (n,) into one target pass.

    The trunk is cut after the last anchor (later rows are seen by no branch). `tokens` are full-vocabulary ids.
    """
    n, M, k = tokens.shape
    T = int(anchors.max()) + 1
    rep = first_equal_branch(tokens)  # (n, M, k)
    branch = torch.arange(M)[None, :, None]
    distinct = rep == branch  # (n, M, k)
    inner = distinct[:, :, : k - 1]  # nodes that are some token's predecessor
    a_idx, m_idx, d_idx = inner.nonzero(as_tuple=True)  # (N,) each, in (anchor, branch, depth) order
    N = len(a_idx)
    node_of = torch.full((n, M, max(k - 1, 1)), -1, dtype=torch.long)
    node_of[a_idx, m_idx, d_idx] = torch.arange(N)
    # the node a branch passes through at depth d is the one held by its first equal branch
    d_grid = torch.arange(k - 1)[None, None, :].expand(n, M, k - 1)
    a_grid = torch.arange(n)[:, None, None].expand(n, M, k - 1)
    through = node_of[a_grid, rep[:, :, : k - 1], d_grid]  # (n, M, k-1)

    teacher_rows = torch.empty(n, M, k, dtype=torch.long)
    teacher_rows[:, :, 0] = anchors[:, None]
    teacher_rows[:, :, 1:] = T + through

    causal = torch.ones(T, T, dtype=torch.bool).tril()
    sees_trunk = torch.arange(T)[None, :] <= anchors[a_idx][:, None]  # (N, T)
    # node j is an ancestor-or-self of node i: same anchor, not deeper, and i's branch passes through j
    on_path = rep[a_idx[:, None], m_idx[:, None], d_idx[None, :]] == m_idx[None, :]  # (N, N)
    sees_nodes = (a_idx[:, None] == a_idx[None, :]) & (d_idx[None, :] <= d_idx[:, None]) & on_path
    allowed = torch.cat(
        [torch.cat([causal, torch.zeros(T, N, dtype=torch.bool)], 1), torch.cat([sees_trunk, sees_nodes], 1)], 0
    )
    input_ids = torch.cat([trunk[:T], tokens[a_idx, m_idx, d_idx]])
    position_ids = torch.cat([torch.arange(T), anchors[a_idx] + 1 + d_idx])
    return ProposalTrees(input_ids, position_ids, allowed, teacher_rows, distinct, N)


def alive_after_eos(tokens: torch.LongTensor, eos_ids: torch.LongTensor) -> torch.Tensor:
    """(…, k) bool: False for every token after an end-of-sequence token of the same branch (nothing follows)."""
    is_eos = torch.isin(tokens, eos_ids)
    before = torch.cumsum(is_eos.long(), dim=-1) - is_eos.long()  # EOS tokens strictly earlier
    return before == 0


__all__ = ["ProposalTrees", "alive_after_eos", "first_equal_branch", "pack_proposal_trees"]
