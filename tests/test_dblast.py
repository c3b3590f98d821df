"""DBLAST: exact mixture conditionals, the acceptance-oriented loss, lossless decoding, save/load."""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import make_drafter
from transformers import AutoModel

from hf_specdec import DBLASTConfig, DBLASTDrafter, DecodingSettings
from hf_specdec.models.dblast.mixture import greedy_component, mixture_conditionals, sample_block
from hf_specdec.training.losses import expected_verified_length_loss, mixture_nll

NEW_TOKENS = 25


def _mixture(seed=0, k=3, R=2, V=4):
    g = torch.Generator().manual_seed(seed)
    log_pi = torch.randn(R, generator=g).log_softmax(-1)
    logq = (torch.randn(k, R, V, generator=g) * 2).log_softmax(-1)
    return log_pi, logq


def test_posterior_conditionals_equal_the_brute_force_marginals_of_the_joint():
    log_pi, logq = _mixture()
    k, R, V = logq.shape
    joint = torch.zeros((V,) * k)
    for xs in itertools.product(range(V), repeat=k):
        joint[xs] = sum(
            log_pi[z].exp() * torch.stack([logq[s, z, x] for s, x in enumerate(xs)]).exp().prod() for z in range(R)
        )
    assert float(joint.sum()) == pytest.approx(1.0, abs=1e-5)
    for xs in itertools.product(range(V), repeat=k):
        cond = mixture_conditionals(log_pi, logq, torch.tensor(xs))  # (k, V)
        for s in range(k):
            prefix = joint[xs[:s]] if s else joint
            marginal = prefix.sum(dim=tuple(range(1, prefix.dim()))) if prefix.dim() > 1 else prefix
            torch.testing.assert_close(cond[s], marginal / marginal.sum(), atol=1e-5, rtol=1e-4)


def test_sampled_blocks_follow_the_joint_and_come_with_their_conditionals():
    log_pi, logq = _mixture(seed=1, k=2, R=3, V=3)
    torch.manual_seed(0)
    counts = torch.zeros(3, 3)
    for _ in range(6000):
        tokens, cond = sample_block(log_pi, logq, branches=2)
        counts[tokens[0, 0], tokens[1, 0]] += 1
        torch.testing.assert_close(cond, mixture_conditionals(log_pi, logq, tokens[:, 0]))
    joint = torch.einsum("z,za,zb->ab", log_pi.exp(), logq[0].exp(), logq[1].exp())
    from bounds import assert_distribution

    assert_distribution(counts, joint)  # false-failure probability 1e-6


def test_loss_equals_monte_carlo_expected_accepted_length():
    """Product drafts and targets that do not depend on the prefix: the loss is exactly 1 - E[accepted] / k."""
    g = torch.Generator().manual_seed(3)
    k, V, runs = 4, 5, 20000
    p = torch.softmax(torch.randn(k, V, generator=g) * 1.5, -1)
    q = torch.softmax(torch.randn(k, V, generator=g) * 1.5, -1)
    drafts = torch.stack([torch.multinomial(q[s], runs, replacement=True, generator=g) for s in range(k)], 1)
    ratio = (p.gather(1, drafts.T) / q.gather(1, drafts.T)).T.clamp(max=1)  # (runs, k) acceptance probabilities
    accepted = (torch.rand(runs, k, generator=g) < ratio).int().cumprod(1).sum(1).float()  # drafts accepted per run
    loss = expected_verified_length_loss(p[None], q[None])
    # E[A] <= k: the standard error of the mean is below sqrt(k^2 / 4 / runs); 5 sigma
    assert float(1 - loss) * k == pytest.approx(float(accepted.mean()), abs=5 * k / 2 / runs**0.5)
    assert expected_verified_length_loss(p[None], p[None]) == pytest.approx(0.0, abs=1e-6)


def test_mixture_nll_is_the_log_sum_exp_of_the_joint():
    log_pi, logq = _mixture(seed=2)
    tokens = torch.tensor([[1, 3, 0]])
    valid = torch.ones(1, 3, dtype=torch.bool)
    joint = sum(log_pi[z].exp() * logq[[0, 1, 2], z, [1, 3, 0]].exp().prod() for z in range(2))
    torch.testing.assert_close(mixture_nll(log_pi[None], logq[None], tokens, valid), -joint.log() / 3)


def test_greedy_component_prefers_the_most_likely_argmax_block():
    log_pi = torch.tensor([0.7, 0.3]).log()
    logq = torch.tensor([[[0.5, 0.5], [1.0, 0.0]], [[0.5, 0.5], [1.0, 0.0]]]).clamp_min(1e-9).log()  # (2, 2, 2)
    assert int(greedy_component(log_pi, logq)) == 1  # 0.3 * 1 > 0.7 * 0.5 * 0.5


def dblast(target, block_size=5, seed=0, **kwargs):
    drafter = DBLASTDrafter.from_block_drafter(make_drafter(target, block_size), mixture_rank=8, **kwargs).eval()
    torch.manual_seed(seed)
    torch.nn.init.normal_(drafter.mixture_head.up.weight, std=1.0)  # components that really differ
    return drafter


def test_fresh_head_drafts_like_its_backbone(target, prompt):
    base = make_drafter(target, 5)
    drafter = DBLASTDrafter.from_block_drafter(base).eval()
    ref = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=base)
    out = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=drafter)
    assert torch.equal(out, ref) and drafter.last_acceptance_stats.accepted == base.last_acceptance_stats.accepted


@pytest.mark.parametrize(
    "settings", [DecodingSettings(), DecodingSettings(tree_budget=8, tree_topk=2)], ids=["chain", "tree"]
)
@pytest.mark.parametrize("block_size", [3, 8])
def test_dblast_greedy_output_equals_plain(target, prompt, block_size, settings):
    drafter = dblast(target, block_size, mixture_components=4)
    drafter.decoding = settings
    ref = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS)
    assert torch.equal(
        target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=drafter), ref
    )


def test_save_and_load_through_auto_model(target, tmp_path):
    drafter = dblast(target, 4, mixture_components=3)
    drafter.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path)
    assert isinstance(loaded, DBLASTDrafter) and isinstance(loaded.config, DBLASTConfig)
    assert loaded.config.mixture_components == 3
    for name, tensor in drafter.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name
