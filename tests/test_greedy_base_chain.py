"""Greedy base-LM chains (`DecodingSettings.greedy_base_drafts`): the PARD drafter's base LM drafts an argmax chain,
one pass each, verified whole; with the adaptive budget each greedy block is that chain or the adapter's tree, chosen
by realized rates.

Contracts: greedy output equals plain greedy with chains that are all, none or exactly j accepted (every block a
chain, and chosen per block); a base LM that is the target itself has its whole chain accepted at every step (its
cache and positions line up); a chain ends where its path q falls below the stop; the budget verifies such a tree
whole and keeps it out of its acceptance counts and drafter timings; a greedy probe runs twice, and the better rate,
not the first option, becomes current.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import MASK_ID, VOCAB, OracleReference, OracleScores, assert_batch_and_server_equal_plain, tiny_target
from transformers import GenerationConfig

import hf_specdec
from hf_specdec import DecodingSettings, PardCandidateGenerator, PardConfig, PardDrafter
from hf_specdec.decoding.acceptance_model import AcceptanceModel
from hf_specdec.decoding.budget import Budget, StepRecord
from hf_specdec.decoding.budget_memory import BudgetMemory
from hf_specdec.decoding.step_cost import StepCostModel
from hf_specdec.models.pard.ar_choice import PROBE_EVERY, TRIED, ArChoice, greedy_choice_of
from hf_specdec.models.pard.base_chain import BaseChain
from hf_specdec.verification.tree import DraftTree, best_first_tree

K = 6  # drafts a chain may hold
NEW = 60  # tokens per call: room for the tries of both ways and chains after them


class OracleBaseChain(BaseChain):
    """The base LM's real passes run (its cache fills as in decoding); their scores peak on the reference
    continuation, and at the generator's `corrupt_at` depth a wrong token scores just above it."""

    def greedy_chain(self, input_ids, k, stop):
        self.committed = input_ids.shape[1]
        return super().greedy_chain(input_ids, k, stop)

    def _scores(self, feed, positions, mask, n):
        real = super()._scores(feed, positions, mask, n)  # (n, V)
        ref, j = self.generator.drafter.reference_for(feed)
        at = int(positions[0, -1]) + 1  # the position the last fed slot predicts
        depth = at - self.committed  # 0: draft 1
        token = int(ref[0, at]) if at < ref.shape[1] else 3
        logits = torch.zeros_like(real)
        logits[-1, token] = 8.0
        if j is not None and depth == j:
            logits[-1, (token + 1) % logits.shape[-1]] = 8.1  # the argmax is wrong at depth j
        return logits


class OracleChainGenerator(OracleScores, PardCandidateGenerator):
    chain_class = OracleBaseChain


class OracleChainDrafter(OracleReference, PardDrafter):
    pass


hf_specdec.register_drafter_kind(OracleChainDrafter, OracleChainGenerator, config_class=PardConfig)


def chain_drafter(target, cls=PardDrafter, seed=7, **settings) -> PardDrafter:
    """A PARD drafter over a tiny LM of `seed`, holding that LM's own weights as its base LM (whose chains read the
    drafter's head rows, as the shipped adapter's do)."""
    drafter = cls.from_causal_lm(tiny_target("llama", seed=seed), target, mask_token_id=MASK_ID, block_size=4)
    drafter.attach_base_lm(tiny_target("llama", seed=seed))
    drafter.decoding = DecodingSettings(greedy_base_drafts=K, **settings)
    return drafter.eval()


@pytest.mark.parametrize("corrupt_at", [None, 0, 2])
@pytest.mark.parametrize("budget", ["fixed", "auto"])
def test_greedy_output_equals_plain_when_all_none_or_j_chain_drafts_are_accepted(prompt, corrupt_at, budget):
    """Every block a chain ("fixed"; stop 0: K drafts each), or chains and adapter trees chosen per block ("auto",
    the oracle's trees corrupted at the same depth): output is plain greedy's, and every full chain has exactly the
    drafts before the corrupted one accepted (with "auto" the choice, read from realized timings, decides how many
    chains run; `test_a_greedy_probe_runs_twice_and_the_better_rate_becomes_current` pins the choice itself)."""
    target = tiny_target("llama")
    plain = target.generate(prompt, max_new_tokens=NEW, do_sample=False)
    drafter = chain_drafter(target, OracleChainDrafter, budget=budget, greedy_base_stop=0.0, tree_budget=4)
    drafter.reference = target.generate(prompt, max_new_tokens=NEW + K, do_sample=False, eos_token_id=None)
    drafter.corrupt_at = corrupt_at
    out = target.generate(prompt, max_new_tokens=NEW, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, plain)
    stats = drafter.last_acceptance_stats
    expected = {None: K, 0: 0, 2: 2}[corrupt_at]
    full = [a for d, a in zip(stats.drafted, stats.accepted, strict=True) if d == K]
    assert all(a == expected for a in full)
    if budget == "fixed":  # with "auto" how many blocks are chains depends on this machine's timings
        assert full


def test_a_base_lm_that_is_the_target_has_its_whole_chain_accepted_every_step(prompt):
    """The target's own argmax chain is right at every depth, which holds only if the base LM's cache and positions
    line up with the committed tokens at every step (the chain's drafts cropped after each block)."""
    target = tiny_target("llama")
    drafter = chain_drafter(target, seed=0, budget="fixed", greedy_base_stop=0.0)
    plain = target.generate(prompt, max_new_tokens=30, do_sample=False)
    out = target.generate(prompt, max_new_tokens=30, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, plain)
    stats = drafter.last_acceptance_stats
    assert all(a == d for a, d in zip(stats.accepted, stats.drafted, strict=True))
    assert max(stats.drafted) == K  # chains past the adapter's block of 3


def test_greedy_chains_end_where_their_path_q_falls_below_the_stop():
    """A chain keeps drafting while the product of its drafts' q reaches `greedy_base_stop` and ends at the first
    draft that takes it below (or at k drafts); its cache holds the committed tokens again afterwards."""
    target, prompt = tiny_target("llama"), torch.tensor([[1, 5, 9, 12, 7, 3, 8, 2]])
    # as loaded: "auto" may time int8 copies faster on some CPUs, whose argmax is not the fp32 base's compared below
    drafter = chain_drafter(target, seed=3, budget="fixed", greedy_base_stop=0.02, sampled_base_weights="as_loaded")
    lengths = set()
    for extra in range(12):
        ids = torch.cat([prompt, torch.arange(10, 10 + extra)[None]], dim=-1)
        gen = PardCandidateGenerator(drafter, target, GenerationConfig(max_length=64))
        tree = gen.greedy_tree(ids, 12, 0, 1)
        assert tree.whole and tree.is_chain() and gen.base_chain.cache.get_seq_length() == ids.shape[1]
        logits = drafter.base_lm(torch.cat([ids, torch.tensor([tree.tokens])], dim=-1)).logits[0].float()
        q = logits[ids.shape[1] - 1 : -1].softmax(-1)  # (len(tree), V) the base LM's q at each draft
        assert tree.tokens == q.argmax(-1).tolist()
        path = [math.prod(q[i, t].item() for i, t in enumerate(tree.tokens[: d + 1])) for d in range(len(tree))]
        assert all(p >= 0.02 for p in path[:-1]) and (len(tree) == 12 or path[-1] < 0.02), path
        lengths.add(len(tree))
    assert len(lengths) > 1, lengths


def test_the_budget_verifies_a_whole_tree_whole_and_learns_nothing_of_its_nodes():
    """A chain the drafter chose and paid for (`DraftTree.whole`) is verified whole however little its nodes are
    worth, is not counted in the acceptance model and its drafter seconds do not join those the models add to cut
    trees; a cut tree of the same step kind is still cut."""
    costs = StepCostModel("whole")
    for fed in range(1, 40):
        costs.record(fed, 0.010 * (1 + 0.5 * (fed - 1)))  # verifying is dear: a cut tree keeps few nodes
    budget = Budget(BudgetMemory(costs, AcceptanceModel()))
    budget.memory.draft_seconds = [0.001]
    chain = DraftTree(whole=True)
    for i in range(10):
        chain.add(5 + i, i - 1)
    plan = budget.plan(1, lambda: [chain])
    assert plan.drafted and plan.trees[0] is chain
    before = {k: dict(v) for k, v in budget.memory.acceptance.counts.items()}
    budget.learn(StepRecord(plan, [list(range(10))], 11, 0.06, 0.5, 11))
    assert {k: dict(v) for k, v in budget.memory.acceptance.counts.items()} == before
    assert budget.memory.draft_seconds == [0.001]
    tree = best_first_tree([[-3.0] * 2] * 7, [[5, 6]] * 7, 10)  # an adapter tree the models value low: cut
    assert len(budget.plan(1, lambda: [tree]).trees[0]) < len(tree)


def test_whole_chains_that_commit_less_per_second_than_plain_steps_are_sent_to_plain_steps():
    """The budget keeps its plain steps for greedy chains: judged by their realized rate alone (no model values their
    nodes), chains that commit 10 tokens/s against plain steps' 100 are followed by plain steps."""
    costs = StepCostModel("flat")
    for fed in range(1, 40):
        costs.record(fed, 0.010)
    budget = Budget(BudgetMemory(costs, AcceptanceModel()))
    chain = DraftTree(whole=True)
    for i in range(8):
        chain.add(5 + i, i - 1)
    for _ in range(3):
        plan = budget.plan(1, lambda: [chain])
        assert plan.drafted
        budget.learn(StepRecord(plan, [None], 9, 0.010, 0.19, 2))
    assert not budget.plan(1, lambda: [chain]).drafted


def test_a_greedy_probe_runs_twice_and_the_better_rate_becomes_current():
    """Greedy blocks choose "block" or "base"; once both are tried the better rate is current (no incumbent by
    order), and the other way's probe runs two steps in a row (its first catches up, unjudged)."""
    choice = ArChoice(largest=0, greedy=True)
    assert choice.options == ["block", "base"]
    picked = []
    for _ in range(3 * PROBE_EVERY + 1):  # ends after a probe's second step
        m = choice.choose()
        choice.learn(m, {"block": 2, "base": 5}[m], 1.0)
        picked.append(m)
    assert picked[: 2 * TRIED] == ["block"] * TRIED + ["base"] * TRIED
    after = picked[2 * TRIED :]
    probes = [i for i, m in enumerate(picked, start=1) if m == "block" and i > 2 * TRIED]
    assert probes and len(probes) % 2 == 0 and all(probes[i + 1] == probes[i] + 1 for i in range(0, len(probes), 2))
    assert after.count("base") == len(after) - len(probes)


def test_greedy_base_drafts_need_base_weights_and_are_checked():
    target = tiny_target("llama")
    drafter = PardDrafter.from_causal_lm(tiny_target("llama", seed=7), target, mask_token_id=MASK_ID, block_size=4)
    drafter.decoding = DecodingSettings(greedy_base_drafts=8)
    with pytest.raises(ValueError, match="greedy_base_drafts needs the drafter's base LM"):
        PardCandidateGenerator(drafter, target, GenerationConfig(max_length=64))
    with pytest.raises(ValueError, match="greedy_base_stop"):
        DecodingSettings(greedy_base_stop=1.5)
    with pytest.raises(ValueError, match="greedy_base_drafts"):
        DecodingSettings(greedy_base_drafts=-1)
    assert DecodingSettings(budget="fixed", greedy_base_drafts=4).needs_own_loop(do_sample=False)
    assert greedy_choice_of(drafter) is greedy_choice_of(drafter)  # one memory on the drafter, across calls


@pytest.mark.parametrize("budget", ["fixed", "auto"])
def test_batches_and_the_server_with_greedy_chains_equal_plain(budget):
    """Left-padded batches and the server: each row's chain reads its own committed tokens (the batch's shared
    adapter pass, when the row chose a chain, goes unused)."""
    target = tiny_target("llama")
    g = torch.Generator().manual_seed(9)
    prompts = [torch.randint(3, VOCAB - 1, (n,), generator=g) for n in (9, 14)]
    drafter = chain_drafter(target, seed=0, budget=budget)
    assert_batch_and_server_equal_plain(target, drafter, prompts, new_tokens=24)
