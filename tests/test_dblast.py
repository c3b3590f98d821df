"""DBLAST: exact mixture conditionals, the acceptance-oriented loss, lossless decoding, save/load."""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import make_drafter
from transformers import AutoModel, GenerationConfig, LogitsProcessorList, TemperatureLogitsWarper

import hf_specdec
from hf_specdec import BlockDrafter, BlockDrafterConfig, DBLASTDrafter, DecodingSettings, head_of
from hf_specdec.models.heads.dblast.mixture import (
    greedy_block,
    greedy_component,
    mixture_conditionals,
    sample_blocks,
)
from hf_specdec.models.registry import generator_class_for
from hf_specdec.training.losses import expected_verified_length_loss, mixture_nll

NEW_TOKENS = 25


def _mixture(seed=0, k=3, R=2, V=4):
    """One block's mixture: (R,) log pi and (k, R, V) log q_s(. | z) (the functions take a batch: add [None])."""
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
    blocks = torch.tensor(list(itertools.product(range(V), repeat=k)))  # (V^k, k) every block, one batch
    conditionals = mixture_conditionals(log_pi[None], logq[None], blocks[None])[0]  # (V^k, k, V)
    for xs, cond in zip(map(tuple, blocks.tolist()), conditionals, strict=True):
        for s in range(k):
            prefix = joint[xs[:s]] if s else joint
            marginal = prefix.sum(dim=tuple(range(1, prefix.dim()))) if prefix.dim() > 1 else prefix
            torch.testing.assert_close(cond[s], marginal / marginal.sum(), atol=1e-5, rtol=1e-4)


def test_sampled_blocks_follow_the_joint_and_come_with_their_conditionals():
    """`sample_blocks` draws from the joint (z ~ pi, then every position from q_s(. | z)), and a drafter's sampled
    proposal carries, as the q acceptance uses, the exact conditionals `mixture_conditionals` gives its block (the
    function the DBLAST policy trains with)."""
    log_pi, logq = _mixture(seed=1, k=2, R=3, V=3)
    rng = torch.Generator().manual_seed(0)
    blocks = sample_blocks(log_pi[None], logq[None], draws=6000, rng=rng)[0]  # (6000, k)
    assert blocks.shape == (6000, 2)
    counts = torch.zeros(3, 3)
    counts.index_put_((blocks[:, 0], blocks[:, 1]), torch.ones(6000), accumulate=True)
    joint = torch.einsum("z,za,zb->ab", log_pi.exp(), logq[0].exp(), logq[1].exp())
    from bounds import assert_distribution

    assert_distribution(counts, joint)  # false-failure probability 1e-6


def test_a_sampled_proposal_comes_with_the_policy_s_conditionals(target, prompt):
    """Decoding's sampled block (the head's proposals) carries q = the DBLAST policy's `path_q` of that block at the
    call's temperature: the q training takes and the q speculative sampling accepts with are one."""
    from hf_specdec.training.specopd import policy_for

    drafter = dblast(target, 5, mixture_components=4)
    width = len(drafter.config.target_layer_ids) * target.config.hidden_size
    features = torch.randn(1, prompt.shape[1], width, generator=torch.Generator().manual_seed(0))

    def generator():  # a fresh one per pass (a pass fills the drafter's cache), given the same target features
        gen = generator_class_for(drafter)(drafter, target, GenerationConfig(max_length=100))
        gen.queue_features(features)
        return gen

    k, temperature = 4, 0.7
    policy = policy_for(drafter, target.get_input_embeddings(), temperature, torch.arange(target.config.vocab_size))
    assert type(policy).__name__ == "DBLASTPolicy"
    with torch.no_grad():
        gen = generator()
        assert gen.head is not None and type(gen) is generator_class_for(make_drafter(target, 5))  # the base's
        hidden, unary = gen.block_states(prompt, k)  # (k + 1, H), (k, V) the states decoding hands the head
        scores = policy.scores(hidden[None], torch.cat([unary[:1], unary])[None], prompt[0, -1:])
        torch.manual_seed(4)
        processors = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
        tree = generator().sampled_tree(prompt, k, 3, processors)  # the chain plus 2 siblings per depth
    trunk = tree.path_to(tree.depths().index(k))  # the first node of each depth: the sampled block
    assert [tree.q_of[i] for i in trunk] == list(range(k))
    block = torch.tensor([tree.tokens[i] for i in trunk])  # (k,) (full ids = draft ids: no reduced vocabulary)
    q = policy.path_q(scores, block[None, None])[0, 0]  # (k, V)
    torch.testing.assert_close(tree.q.float(), q, atol=1e-5, rtol=1e-4)


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
    assert greedy_component(log_pi[None], logq[None]).tolist() == [1]  # 0.3 * 1 > 0.7 * 0.5 * 0.5
    assert greedy_block(log_pi[None], logq[None]).tolist() == [[0, 0]]  # its argmax block (a tie at slot 0: first)


def dblast(target, block_size=5, seed=0, **kwargs):
    drafter = DBLASTDrafter.from_block_drafter(make_drafter(target, block_size), mixture_rank=8, **kwargs).eval()
    assert type(drafter) is BlockDrafter and head_of(drafter).name == "dblast"
    torch.manual_seed(seed)
    torch.nn.init.normal_(drafter.mixture_head.up.weight, std=1.0)  # components that really differ
    return drafter


def test_fresh_head_drafts_like_its_backbone(target, prompt):
    base = make_drafter(target, 5)
    drafter = hf_specdec.attach_head(base, "dblast").eval()
    assert head_of(base) is None and head_of(drafter).name == "dblast" and drafter.fc is base.fc  # shared backbone
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
    assert type(loaded) is BlockDrafter and isinstance(loaded, DBLASTDrafter)  # the base's class, with the head
    assert loaded.config.model_type == BlockDrafterConfig.model_type and head_of(loaded).name == "dblast"
    assert loaded.config.head == {"type": "dblast", "mixture_components": 3, "mixture_rank": 8}
    assert type(hf_specdec.load_drafter(tmp_path)) is BlockDrafter
    for name, tensor in drafter.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name
