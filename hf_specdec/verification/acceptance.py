"""Acceptance rules: which drafted nodes the target keeps, and the token it adds (p = target, q = draft).

Greedy: follow the target's argmax from the root while a child carries it; the first argmax with no matching
child is the bonus token. Output equals greedy decoding exactly.

Sampling: multi-draft speculative sampling (Leviathan et al. 2023, Algorithm 1, extended to several children
per node as in SpecInfer, Miao et al. 2023, arXiv 2305.09781; docs/verification.md sections 5-7). At a node with
target distribution p, its children are tried in order; child x drawn from q is accepted with probability
min(1, p(x) / q(x)); after a rejection p becomes the residual norm(max(0, p - q)). Acceptance descends into an
accepted child; when no child is accepted, the emitted token is drawn from the current p. Each child must be
an independent draw from its own q given the path (i.i.d. siblings from one q, or a deterministic candidate
whose q is one-hot); then every emitted token is distributed exactly as under plain sampling from p.
"""

from __future__ import annotations

import torch

from .processed import sample
from .tree import DraftTree


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) over the last dim, in float32 (Leviathan et al. 2023, eq. after Algorithm 1).

    Zero-mass guard: when p <= q everywhere (p == q up to rounding) the residual has no mass; a rejection then
    had probability zero, and p itself is returned instead of a NaN row.
    """
    p, q = p.float(), q.float()
    residual = (p - q).clamp_(min=0.0)
    mass = residual.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, residual / mass.clamp_min(torch.finfo(torch.float32).tiny), p)


def one_hot_residual(p: torch.Tensor, token: int) -> torch.Tensor:
    """Residual after rejecting a deterministic candidate (q one-hot on `token`): p without it, renormalised."""
    q = torch.zeros_like(p)
    q[..., token] = 1.0
    return residual_distribution(p, q)


def greedy_acceptance(tree: DraftTree, target_argmax: list[int]) -> tuple[list[int], int]:
    """Accepted nodes (root to leaf) and the bonus token, given the target's argmax at every row."""
    kids = tree.children()
    row, path = 0, []
    while True:
        want = target_argmax[row]
        child = next((c for c in kids[row] if tree.tokens[c] == want), None)
        if child is None:
            return path, want
        path.append(child)
        row = child + 1


def tried_order(tree: DraftTree, children: list[int]) -> list[int]:
    """`children` (insertion order) in the order speculative sampling tries them: the first, then the prompt-lookup
    nodes, then the rest, each group in insertion order (sampled siblings never change places)."""
    if len(children) < 3:
        return children
    rest = children[1:]
    return [children[0], *[c for c in rest if tree.lookup[c]], *[c for c in rest if not tree.lookup[c]]]


def speculative_sampling(
    tree: DraftTree, p_rows: torch.Tensor, rng: torch.Generator | None = None
) -> tuple[list[int], int]:
    """Multi-draft speculative sampling down the tree.

    Args:
        tree: nodes with their proposal rows (`q_of`, `q`); deterministic nodes have q one-hot.
        p_rows: (N + 1, V) float32 target probabilities after the logits processors, row 0 = root.
    Returns the accepted nodes (root to leaf) and the emitted token after them.

    Children are tried in insertion order, except that prompt-lookup nodes go right after the first child: a copy
    that goes on is then reached before a sampled side leaf that holds the same token and ends the step. Lookup
    tokens are not drawn from q, so moving them leaves every sampled child's law given the children tried before it
    (its q row) as it was.
    """
    kids = tree.children()
    row, path = 0, []
    while True:
        p = p_rows[row]  # (V,)
        accepted = None
        for c in tried_order(tree, kids[row]):
            x = tree.tokens[c]
            q = tree.q[tree.q_of[c]] if tree.q_of[c] >= 0 else None  # (V,) or one-hot
            qx = q[x] if q is not None else torch.ones((), device=p.device)
            u = torch.rand((), device=p.device, generator=rng)
            if bool(u * qx < p[x]):  # accept with probability min(1, p(x) / q(x))
                accepted = c
                break
            p = residual_distribution(p, q) if q is not None else one_hot_residual(p, x)
        if accepted is None:
            return path, int(sample(p, 1, rng))
        path.append(accepted)
        row = accepted + 1


__all__ = ["greedy_acceptance", "one_hot_residual", "residual_distribution", "speculative_sampling", "tried_order"]
