"""The acceptance rules as mathematics: residuals, and the distribution of what a tree walk emits.

Distribution tests draw thousands of trees with known p and q (V = 6) and check the emitted token against p
with `bounds.assert_distribution` (false-failure probability 1e-6 per assertion). A deliberately wrong rule
(rejections that forget to subtract q) is run through the same check to show that it has the power to fail.
"""

from __future__ import annotations

import pytest
import torch
from bounds import assert_distribution, distribution_excess

from hf_specdec.verification.acceptance import (
    greedy_acceptance,
    one_hot_residual,
    residual_distribution,
    speculative_sampling,
    tried_order,
)
from hf_specdec.verification.processed import sample
from hf_specdec.verification.tree import DraftTree

V = 6
DRAWS = 6000


def _dist(seed, sharp=1.5):
    return torch.softmax(torch.randn(V, generator=torch.Generator().manual_seed(seed)) * sharp, dim=-1)


P_ROOT, Q_ROOT, P_CHILD = _dist(1), _dist(2), _dist(3)


def test_residual_is_normalised_positive_part():
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.5, 0.3])
    torch.testing.assert_close(residual_distribution(p, q), torch.tensor([1.0, 0.0, 0.0]))
    torch.testing.assert_close(one_hot_residual(p, 0), torch.tensor([0.0, 0.6, 0.4]))


def test_residual_zero_mass_guard_returns_p_not_nan():
    p = torch.tensor([0.25, 0.25, 0.5])
    out = residual_distribution(p, p.clone())
    assert torch.isfinite(out).all() and torch.equal(out, p)
    bf16 = residual_distribution(p.bfloat16(), (p + 1e-3).bfloat16())  # rounding leaves no positive mass
    assert bf16.dtype == torch.float32 and torch.isfinite(bf16).all()


def test_greedy_acceptance_follows_the_argmax():
    tree = DraftTree()
    a = tree.add(4, -1)
    tree.add(2, -1)
    tree.add(5, a)
    assert greedy_acceptance(tree, [4, 0, 1, 3]) == ([0], 0)  # root argmax 4 -> node 0; its argmax 0 has no child
    assert greedy_acceptance(tree, [2, 0, 3, 3]) == ([1], 3)
    assert greedy_acceptance(tree, [4, 5, 1, 3]) == ([0, 2], 3)
    assert greedy_acceptance(tree, [1, 5, 1, 3]) == ([], 1)


def _tree(kind, g):
    """A depth-2 tree under the root: children drawn from Q_ROOT (and/or deterministic), a child under the first."""
    tree = DraftTree(q=torch.stack([Q_ROOT, _dist(4)]))
    if kind in ("chain", "siblings", "siblings+lookup"):
        n = 1 if kind == "chain" else 3
        for x in torch.multinomial(Q_ROOT, n, replacement=True, generator=g).tolist():
            tree.add(x, -1, q_row=0)
    if kind in ("siblings+lookup", "deterministic"):
        for x in [1] if kind == "siblings+lookup" else [2, 0, 5]:
            tree.add(x, -1)
    tree.add(int(torch.multinomial(tree.q[1], 1, generator=g)), 0, q_row=1)
    return tree


def _first_tokens(walk, kind, seed):
    """Emitted tokens: the first after the root, and the second when the walk went through node 0."""
    g = torch.Generator().manual_seed(seed)
    first, second = torch.zeros(V), torch.zeros(V)
    for _ in range(DRAWS):
        tree = _tree(kind, g)
        p_rows = torch.stack([P_ROOT] + [P_CHILD] * len(tree))
        path, bonus = walk(tree, p_rows, g)
        emitted = [tree.tokens[c] for c in path] + [bonus]
        first[emitted[0]] += 1
        if path[:1] == [0]:
            second[emitted[1]] += 1
    return first, second


@pytest.mark.parametrize("kind", ["chain", "siblings", "siblings+lookup", "deterministic"])
def test_speculative_sampling_emits_exactly_p(kind):
    first, second = _first_tokens(speculative_sampling, kind, seed=len(kind))
    assert_distribution(first, P_ROOT)
    assert_distribution(second, P_CHILD)  # after descending into node 0, the next token is p at node 0


def test_a_copy_that_goes_on_is_tried_before_a_sampled_leaf_of_the_same_token():
    """Root children: a sampled chain draft (token 0), a sampled side leaf (token 2, q without token 0) and a
    prompt-lookup node (token 2) with a lookup child (token 3). The target wants 2 then 3: the lookup node is tried
    right after the first child, so the walk goes on down the copy (2, 3) instead of ending at the leaf."""
    q = torch.tensor([[0.5, 0.0, 0.5, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]])  # q, and q without token 0
    tree = DraftTree(q=q)
    tree.add(0, -1, q_row=0)
    tree.add(2, -1, q_row=1)
    tree.add_chain([2, 3], merge=False)
    assert tried_order(tree, tree.children()[0]) == [0, 2, 1]
    p_rows = torch.zeros(len(tree) + 1, V)
    p_rows[0, 2] = p_rows[3, 3] = p_rows[4, 5] = 1.0  # root: 2; after the lookup node: 3; after its child: 5
    p_rows[1, 4] = p_rows[2, 4] = 1.0  # after the chain draft or the leaf: 4
    for seed in range(20):
        assert speculative_sampling(tree, p_rows, torch.Generator().manual_seed(seed)) == ([2, 3], 5)


def _forgetful_walk(tree, p_rows, g):
    """Negative control: a rejected child's q is not subtracted (samples from p after any rejection)."""
    kids, row, path = tree.children(), 0, []
    while True:
        p, accepted = p_rows[row], None
        for c in kids[row]:
            x = tree.tokens[c]
            qx = tree.q[tree.q_of[c], x] if tree.q_of[c] >= 0 else 1.0
            if float(torch.rand((), generator=g)) * qx < p[x]:
                accepted = c
                break
        if accepted is None:
            return path, int(torch.multinomial(p, 1, generator=g))
        path.append(accepted)
        row = accepted + 1


@pytest.mark.parametrize("kind", ["chain", "siblings"])
def test_the_same_check_rejects_a_rule_that_forgets_the_residual(kind):
    first, _ = _first_tokens(_forgetful_walk, kind, seed=7)
    assert distribution_excess(first, P_ROOT, 1e-6) > 1.0


def test_sample_draws_each_row_as_it_is():
    """`sample` (the draw every sampling path uses): one draw per row and several, from (V,) and (rows, V), match
    their rows (false-failure probability 1e-6 per assertion); a draw from the wrong row is caught."""
    rows = torch.stack([P_ROOT, Q_ROOT])  # (2, V)
    g = torch.Generator().manual_seed(0)
    one = torch.cat([sample(rows, 1, g) for _ in range(DRAWS)], dim=1)  # (2, DRAWS)
    many = sample(rows, DRAWS, g)  # (2, DRAWS)
    flat = sample(P_CHILD, DRAWS, g)  # (DRAWS,)
    assert one.shape == many.shape == (2, DRAWS) and flat.shape == (DRAWS,)
    for draws, probs in [(one[0], P_ROOT), (one[1], Q_ROOT), (many[0], P_ROOT), (many[1], Q_ROOT), (flat, P_CHILD)]:
        assert_distribution(torch.bincount(draws, minlength=V), probs)
    assert distribution_excess(torch.bincount(one[1], minlength=V), P_ROOT, 1e-6) > 1.0  # negative control
