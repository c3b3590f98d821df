"""SpecOPD: proposal-tree packing (exact teacher p), the policies' q, and training on tiny models."""

import pytest
import torch
from bounds import assert_distribution
from conftest import make_drafter, tiny_target

from hf_specdec import DBLASTDrafter, DCOCODrafter
from hf_specdec.training.config import DistillationConfig
from hf_specdec.training.data import TrainingSequence, target_features
from hf_specdec.training.proposal_trees import alive_after_eos, first_equal_branch, pack_proposal_trees
from hf_specdec.training.specopd import SpecOPDTrainer, policy_for, teacher_probs
from hf_specdec.verification.tree import mask_for_attention


def test_branches_sharing_a_prefix_share_their_nodes():
    tokens = torch.tensor([[[5, 6, 7], [5, 6, 8], [5, 9, 7], [5, 6, 7]]])  # (1 anchor, 4 branches, 3 tokens)
    rep = first_equal_branch(tokens)
    assert rep[0].tolist() == [[0, 0, 0], [0, 0, 1], [0, 2, 2], [0, 0, 0]]
    trees = pack_proposal_trees(torch.arange(20, 40), torch.tensor([4]), tokens)
    assert trees.supervised == 6  # 5 | 6, 9 | 7, 8, 7
    assert trees.num_nodes == 3  # depth 0: 5; depth 1: 6, 9 (leaves are not fed)
    assert trees.input_ids[5:].tolist() == [5, 6, 9] and trees.position_ids[5:].tolist() == [5, 6, 6]
    assert trees.teacher_rows[0].tolist() == [[4, 5, 6], [4, 5, 6], [4, 5, 7], [4, 5, 6]]


def test_eos_ends_a_branch():
    alive = alive_after_eos(torch.tensor([[3, 2, 4, 5], [2, 3, 3, 3]]), torch.tensor([2]))
    assert alive.tolist() == [[True, True, False, False], [True, False, False, False]]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_one_tree_masked_pass_gives_the_plain_forward_distributions(attn):
    target = tiny_target("llama", attn=attn).float()
    g = torch.Generator().manual_seed(3)
    trunk = torch.randint(3, 250, (30,), generator=g)
    anchors = torch.tensor([6, 13, 21])
    tokens = torch.randint(3, 250, (3, 4, 5), generator=g)
    tokens[:, 1, :2] = tokens[:, 0, :2]  # shared prefixes
    tokens[0, 2] = tokens[0, 0]  # a duplicate branch
    trees = pack_proposal_trees(trunk, anchors, tokens)
    allowed = trees.allowed
    with torch.no_grad():
        hidden = target.model(
            input_ids=trees.input_ids[None],
            position_ids=trees.position_ids[None],
            attention_mask=mask_for_attention(allowed, attn, target.dtype),
        ).last_hidden_state[0]
    packed = teacher_probs(target, hidden, None, 1.0)
    for a in range(3):
        for m in range(4):
            context = torch.cat([trunk[: anchors[a] + 1], tokens[a, m]])[None]
            with torch.no_grad():
                plain = torch.softmax(target(context).logits[0].float(), -1)  # (len, V)
            for s in range(5):
                expect = plain[anchors[a] + s]
                got = packed[trees.teacher_rows[a, m, s]]
                assert torch.allclose(got, expect, atol=1e-5), (a, m, s)


KINDS = {"block": {}, "dcoco": {"cls": DCOCODrafter, "corrector_candidates": 6}, "dblast": {"cls": DBLASTDrafter}}


def nonzero_heads(drafter):
    """Fresh DBLAST heads start as the backbone (zero up-projection); perturb so the mixture matters."""
    if isinstance(drafter, DBLASTDrafter):
        torch.manual_seed(5)
        torch.nn.init.normal_(drafter.mixture_head.up.weight, std=0.5)
    return drafter


def policy_setup(kind, target):
    drafter = nonzero_heads(make_drafter(target, 4, **KINDS[kind]).float())
    embed = target.get_input_embeddings()
    policy = policy_for(drafter, embed, 1.0, torch.arange(embed.weight.shape[0]))
    torch.manual_seed(0)
    hidden = torch.randn(1, 4, drafter.config.hidden_size)
    logits = torch.nn.functional.linear(hidden, drafter.head_weight(target.get_output_embeddings())) * 0.3
    return policy, hidden, logits


@pytest.mark.parametrize("kind", list(KINDS))
def test_branches_are_drawn_from_the_q_the_loss_uses(kind):
    """Slot 2's token given slot 1's: the empirical conditional of many drawn branches matches path_q.

    False-failure probability <= 1e-6 per checked predecessor (Bernstein, union bound over cells)."""
    target = tiny_target("llama").float()
    policy, hidden, logits = policy_setup(kind, target)
    with torch.no_grad():
        scores = policy.scores(hidden, logits, torch.tensor([7]))
        tokens = policy.draw(scores, 20001, torch.Generator().manual_seed(1))[:, 1:]  # drop the greedy branch
        q = policy.path_q(scores, tokens)  # (1, M, k, V)
    first = tokens[0, :, 0]
    assert_distribution(torch.bincount(first, minlength=q.shape[-1]), q[0, 0, 0])
    common = torch.bincount(first).argmax()
    rows = (first == common).nonzero()[:, 0]
    assert len(rows) > 300
    assert torch.allclose(q[0, rows, 1], q[0, rows[0], 1].expand(len(rows), -1))  # q of slot 2 given slot 1
    assert_distribution(torch.bincount(tokens[0, rows, 1], minlength=q.shape[-1]), q[0, rows[0], 1])


def specopd_setup(tmp_path, kind, steps=30, **overrides):
    target = tiny_target("llama")
    g = torch.Generator().manual_seed(7)
    seqs = []
    for _ in range(3):  # trunks are the target's own (greedy) text, as in real training data
        prompt = torch.randint(3, 250, (8,), generator=g)
        ids = target.generate(prompt[None], max_new_tokens=32, min_new_tokens=32, do_sample=False)[0]
        seqs.append(TrainingSequence(ids, target_features(target, ids.tolist(), [0, 2, 3]), loss_start=8))
    settings = dict(
        target="tiny",
        output_dir=str(tmp_path),
        num_steps=steps,
        save_every=100,
        batch_size=2,
        anchors_per_sequence=6,
        tree_anchors=4,
        branches=3,
        block_size=4,
        learning_rate=3e-3,
        warmup_ratio=0.1,
    )
    config = DistillationConfig(**{"objective": "specopd", **settings, **overrides})
    drafter = nonzero_heads(make_drafter(target, 4, **KINDS[kind]).float())
    return config, target, drafter, seqs


def expected_accepted(trainer, seqs) -> float:
    """Mean E2E-TV expected accepted drafts per branch (times k) over fixed branches of every sequence."""
    weight, trainer.config.ce_weight = trainer.config.ce_weight, 0.0
    with torch.no_grad():
        loss = sum(float(trainer.sequence_loss(s, torch.Generator().manual_seed(i))[0]) for i, s in enumerate(seqs))
    trainer.config.ce_weight = weight
    return (1 - loss / len(seqs)) * (trainer.drafter.config.block_size - 1)


@pytest.mark.parametrize("kind", list(KINDS))
def test_specopd_raises_the_expected_accepted_length(tmp_path, kind):
    config, target, drafter, seqs = specopd_setup(tmp_path, kind, steps=60, learning_rate=1e-2, ce_weight=1.0)
    trainer = SpecOPDTrainer(config, target, drafter, seqs)
    before = expected_accepted(trainer, seqs)
    state = trainer.train()
    after = expected_accepted(trainer, seqs)
    assert after > before + 0.1, (before, after)
    assert 0 < state["supervised_tokens"] <= 60 * 2 * 4 * 3 * 3  # distinct states <= anchors x branches x k


def test_sequential_opd_supervises_one_block_per_target_pass(tmp_path):
    from hf_specdec.training.sequential_opd import SequentialOPDTrainer

    config, target, drafter, seqs = specopd_setup(
        tmp_path, "block", steps=40, learning_rate=1e-2, ce_weight=1.0, objective="sequential_opd", rollout_rounds=4
    )
    trainer = SequentialOPDTrainer(config, target, drafter, seqs)
    spec = SpecOPDTrainer(config, target, drafter, seqs)
    before = expected_accepted(spec, seqs)
    state = trainer.train()
    assert expected_accepted(spec, seqs) > before + 0.1
    # each verify pass feeds the pending token + k drafts and supervises the k drafts
    assert state["target_tokens"] == 4 * state["branch_tokens"] / 3
    assert 0 < state["supervised_tokens"] <= state["branch_tokens"]


def test_sequential_rollout_follows_the_targets_greedy_text(tmp_path):
    """The committed tokens are exactly the target's greedy continuation (whatever the drafter proposes)."""
    from hf_specdec.training.sequential_opd import SequentialOPDTrainer

    config, target, drafter, seqs = specopd_setup(tmp_path, "block", objective="sequential_opd", rollout_rounds=6)
    trainer = SequentialOPDTrainer(config, target, drafter, seqs)
    seen = []
    original = target.forward

    def spy(input_ids=None, **kwargs):
        seen.append(input_ids[0].tolist())
        return original(input_ids=input_ids, **kwargs)

    target.forward = spy
    trainer.sequence_loss(seqs[0], torch.Generator().manual_seed(0))
    target.forward = original
    prefix = seen[0]
    committed = list(prefix)
    for fed in seen[1:]:
        committed.append(fed[0])  # every verify pass starts with the token committed last
    greedy = target.generate(torch.tensor([prefix + [committed[len(prefix)]]]), max_new_tokens=1, do_sample=False)
    assert committed[: len(prefix) + 1] == greedy[0, :-1].tolist()
    full = target.generate(torch.tensor([prefix]), max_new_tokens=len(committed) - len(prefix), do_sample=False)
    assert committed[len(prefix) :] == full[0, len(prefix) :].tolist()


def test_throughput_measurement_counts_supervised_tokens_per_target_pass(tmp_path):
    from hf_specdec.training.throughput import measure_supervision

    config, target, drafter, seqs = specopd_setup(tmp_path, "block", rollout_rounds=3, tree_anchors=4, branches=4)
    before = {k: v.clone() for k, v in drafter.state_dict().items()}
    seq, spec = measure_supervision(config, target, drafter, seqs, ["sequential_opd", "specopd"], steps=2)
    assert all(torch.equal(v, drafter.state_dict()[k]) for k, v in before.items())  # copies were trained
    assert seq.objective == "sequential_opd" and spec.objective == "specopd"
    assert seq.supervised_per_pass <= 3  # k = block_size - 1 drafts per verify pass
    assert spec.target_passes == 2 * 2 and spec.supervised_per_pass > 3 * seq.supervised_per_pass
    assert 0 < seq.target_seconds <= seq.seconds and spec.tokens_per_second > 0
