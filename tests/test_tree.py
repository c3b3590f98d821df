"""Tree construction (best-first, tries), tree masks and positions, prompt lookup."""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import tiny_target
from transformers import DynamicCache

from hf_specdec.verification.prompt_lookup import prompt_lookup_candidates
from hf_specdec.verification.tree import DraftTree, best_first_tree, tree_attention_mask, tree_position_ids


def _prefix_scores(top_logq, depth_limit):
    """Every prefix (tuple of ranks) with its score, by brute force."""
    width = len(top_logq[0])
    out = {}
    for depth in range(1, depth_limit + 1):
        for ranks in itertools.product(range(width), repeat=depth):
            out[ranks] = sum(top_logq[d][r] for d, r in enumerate(ranks))
    return out


@pytest.mark.parametrize("budget", [1, 3, 7, 15])
def test_best_first_tree_holds_the_highest_scoring_prefixes(budget):
    g = torch.Generator().manual_seed(budget)
    logq = torch.randn(4, 6, generator=g).log_softmax(-1).topk(3, dim=-1).values  # (depth 4, width 3) sorted
    ids = [[10 * d + r for r in range(3)] for d in range(4)]
    tree = best_first_tree(logq.tolist(), ids, budget)
    assert len(tree) == budget
    scores = _prefix_scores(logq.tolist(), 4)
    nodes = {tuple(tree.tokens[i] % 10 for i in tree.path_to(n)) for n in range(len(tree))}
    worst_in = min(scores[r] for r in nodes)
    best_out = max(s for r, s in scores.items() if r not in nodes)
    assert worst_in >= best_out - 1e-9
    assert all(p < i for i, p in enumerate(tree.parents))  # parents come first


def test_budget_equal_to_depth_with_width_one_is_the_argmax_chain():
    tree = best_first_tree([[-0.1], [-0.2], [-0.3]], [[5], [6], [7]], 3)
    assert tree.tokens == [5, 6, 7] and tree.parents == [-1, 0, 1] and tree.is_chain()


def test_add_chain_merges_into_a_trie_only_when_asked():
    tree = DraftTree()
    a = tree.add(5, -1)
    tree.add(6, a)
    tree.add_chain([5, 6, 9], merge=True)
    assert tree.tokens == [5, 6, 9] and tree.parents == [-1, 0, 1]
    tree.add_chain([5, 7], merge=False)
    assert tree.tokens[-2:] == [5, 7] and tree.parents[-2:] == [-1, 3]
    assert tree.children()[0] == [0, 3]


def _sample_tree():
    tree = DraftTree()
    for token, parent in [(11, -1), (12, -1), (13, 0), (14, 0), (15, 1), (16, 2)]:
        tree.add(token, parent)
    return tree


def test_mask_rows_see_prefix_ancestors_and_themselves():
    tree = _sample_tree()
    mask = tree_attention_mask(tree, 3, torch.float32, torch.device("cpu"), boolean=True)[0, 0]
    assert mask.shape == (7, 10)
    assert mask[:, :3].all()
    expected_rows = {0: [0], 1: [0, 1], 2: [0, 2], 3: [0, 1, 3], 4: [0, 1, 4], 5: [0, 2, 5], 6: [0, 1, 3, 6]}
    for row, cols in expected_rows.items():
        assert mask[row, 3:].nonzero().flatten().tolist() == cols
    additive = tree_attention_mask(tree, 3, torch.float32, torch.device("cpu"), boolean=False)[0, 0]
    assert torch.equal(additive == 0, mask)
    assert tree_position_ids(tree, 9, torch.device("cpu")).tolist() == [[9, 10, 10, 11, 11, 11, 12]]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_one_tree_forward_equals_each_branch_run_alone(attn, device):
    target = tiny_target("llama", attn=attn, device=device)
    prefix = torch.randint(3, 200, (1, 9), generator=torch.Generator().manual_seed(0)).to(device)
    tree = _sample_tree()
    cache = DynamicCache(config=target.config)
    with torch.no_grad():
        target(prefix[:, :-1], cache=cache, use_cache=True)
        feed = torch.tensor([[int(prefix[0, -1])] + tree.tokens], device=device)
        mask = tree_attention_mask(tree, 8, target.dtype, device, boolean=attn == "sdpa")
        tree_logits = target(
            feed, attention_mask=mask, position_ids=tree_position_ids(tree, 8, device), cache=cache
        ).logits[0]
        for node in range(len(tree)):
            branch = torch.tensor([[tree.tokens[i] for i in tree.path_to(node)]], device=device)
            alone = target(torch.cat([prefix, branch], dim=-1)).logits[0, -1]
            torch.testing.assert_close(tree_logits[node + 1], alone, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    ("ids", "ngram", "n", "expected"),
    [
        ([1, 2, 3, 4, 9, 1, 2, 3], 3, 4, [4, 9, 1, 2]),  # 3-gram match
        ([1, 2, 3, 4, 9, 7, 2, 3, 5, 6, 2, 3], 3, 2, [4, 9]),  # the first 2-gram match wins
        ([5, 6, 7, 8], 3, 4, []),  # nothing repeats
        ([4, 4, 4], 2, 3, [4]),  # overlapping match, clipped at the end
    ],
)
def test_prompt_lookup_candidates(ids, ngram, n, expected):
    assert prompt_lookup_candidates(torch.tensor([ids]), ngram, n) == expected
