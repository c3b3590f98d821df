"""Sampling through `target.generate(do_sample=True, assistant_model=drafter)` is lossless, end to end.

A target with a vocabulary of 8 and an untrained drafter (its q differs from p, so drafts are both accepted and
rejected). The prompt is fixed; the first new token comes from the prefill, the next ones from a draft-and-verify
step with two drafted positions. Over DRAWS calls, the empirical joint distribution of new tokens 2 and 3 and
each one's marginal must match the target's exact distribution (computed by enumeration), with Bernstein bounds
whose false-failure probability is 1e-6 per assertion (`bounds.py`). A drafter that hands acceptance a different
q than the one it sampled from (the bug class transformers has shipped) fails the same assertions, so they have
power; and the q handed to acceptance is checked against what was drawn with a randomised probability integral
transform (uniform on [0, 1] exactly when each draft is a draw from its q; DKW bound, false-failure 1e-6).
"""

from __future__ import annotations

import pytest
import torch
from bounds import distribution_excess, dkw_uniform_excess
from conftest import tiny_target
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper

import hf_specdec
from hf_specdec import (
    BlockDraftCandidateGenerator,
    BlockDrafter,
    DBLASTDrafter,
    DCOCODrafter,
    DecodingSettings,
    PardDBLASTDrafter,
    PardDCOCODrafter,
    PardDrafter,
)
from hf_specdec.decoding import step

V = 8
DRAWS = 1000
DELTA = 1e-6
PROMPT = torch.tensor([[1, 3, 4, 5, 3, 4, 6]])
CPU = torch.device("cpu")
CASES = {
    "chain": (DecodingSettings(budget="fixed"), 1.0, None),
    "siblings+lookup top-k": (DecodingSettings(budget="fixed", sample_branches=3, prompt_lookup_tokens=2), 0.7, 5),
    "argmax tree": (DecodingSettings(budget="fixed", sampled_drafts="argmax", tree_budget=4, tree_topk=2), 1.0, None),
    "dcoco walk": (DecodingSettings(budget="fixed", sample_branches=2), 1.0, None),  # q restricted to 4 of the 8 tokens
    "dblast mixture": (
        DecodingSettings(budget="fixed", sample_branches=2),
        0.8,
        None,
    ),  # dependent positions, posterior q
    # the adaptive budget: sizes change from step to step (plain steps included), the distribution must not
    "adaptive budget": (DecodingSettings(budget="auto", sample_branches=2, prompt_lookup_tokens=2), 0.7, 5),
    "adaptive, plain steps": (DecodingSettings(budget="auto", sample_branches=2), 1.0, None),
    # a PARD drafter (a small causal LM of the same vocabulary plus a mask token)
    "pard chain": (DecodingSettings(budget="fixed"), 1.0, None),
    "pard siblings+lookup": (DecodingSettings(budget="fixed", sample_branches=3, prompt_lookup_tokens=2), 0.7, 5),
    # heads on a PARD drafter: DCOCO's sampled walk, DBLAST's dependent block with posterior q
    "pard dcoco walk": (DecodingSettings(budget="fixed", sample_branches=2), 1.0, None),
    "pard dblast mixture": (DecodingSettings(budget="fixed", sample_branches=2), 0.8, None),
}
# step-cost curves (seconds per fed token count) pinned for the adaptive cases: verifying free (drafts every step),
# or dear (a drafted step does not pay: the budget verifies nothing, then takes plain steps)
CURVES = {"adaptive budget": lambda n: 1.0, "adaptive, plain steps": lambda n: 1.0 + 0.9 * (n - 1)}


class WrongQGenerator(BlockDraftCandidateGenerator):
    """Samples drafts from q but hands acceptance q at half the temperature (q^2, renormalised)."""

    def sampled_tree(self, *args, **kwargs):
        tree = super().sampled_tree(*args, **kwargs)
        sharp = tree.q**2
        tree.q = sharp / sharp.sum(dim=-1, keepdim=True)
        return tree


class WrongQDrafter(BlockDrafter):
    pass


hf_specdec.register_drafter_kind(WrongQDrafter, WrongQGenerator)


def _processors(temperature, top_k):
    procs = [TemperatureLogitsWarper(temperature)]
    if top_k:
        procs.append(TopKLogitsWarper(top_k))
    return LogitsProcessorList(procs)


def exact_joint(target, temperature, top_k) -> torch.Tensor:
    """(V, V) P(new token 2 = a, new token 3 = b), summing over new token 1, with generate()'s processors."""
    procs = _processors(temperature, top_k)
    pairs = torch.cartesian_prod(torch.arange(V), torch.arange(V))  # (V*V, 2) (x1, x2)
    seqs = torch.cat([PROMPT.expand(V * V, -1), pairs], dim=1).to(target.device)
    with torch.no_grad():
        logits = target(seqs).logits[:, -3:].float()  # (V*V, 3, V)
    probs = [torch.softmax(procs(seqs, logits[:, i]), dim=-1) for i in range(3)]
    p1 = probs[0][0]  # (V,) same prompt for every row
    p2 = probs[1].view(V, V, V)[:, 0]  # (x1, x2) from rows with any x2
    p3 = probs[2].view(V, V, V)  # (x1, x2, x3)
    return torch.einsum("a,ab,abc->bc", p1, p2, p3)


def run_case(name, drafter_cls=BlockDrafter, device="cpu"):
    settings, temperature, top_k = CASES[name]
    target = tiny_target("llama", vocab=V, layers=2, device=device)
    torch.manual_seed(3)
    drafter = drafter_cls.for_target(target, block_size=3, mask_token_id=V - 1).eval()
    if name.startswith("pard"):
        lm = tiny_target("llama", vocab=V, layers=1, seed=7, device=device)  # another model of the same vocabulary
        drafter = PardDrafter.from_causal_lm(lm, target, mask_token_id=V - 1, block_size=3).eval()
    if name.endswith("dcoco walk"):
        make = PardDCOCODrafter.from_pard if name.startswith("pard") else DCOCODrafter.from_block_drafter
        drafter = make(drafter, corrector_candidates=4).eval()
        torch.nn.init.normal_(drafter.corrector.scorer_out.weight, std=2.0)  # transitions that matter
    if name.endswith("dblast mixture"):
        make = PardDBLASTDrafter.from_pard if name.startswith("pard") else DBLASTDrafter.from_block_drafter
        drafter = make(drafter, mixture_components=3, mixture_rank=4).eval()
        torch.nn.init.normal_(drafter.mixture_head.up.weight, std=2.0)  # components that differ
    drafter.decoding = settings
    if name in CURVES:
        hf_specdec.cost_model(target).pin({n: CURVES[name](n) for n in range(1, 65)})
    trees = []
    walk = step.speculative_sampling

    def spy(tree, p_rows, rng=None):  # records what acceptance is handed, then runs the real rule
        trees.append(tree)
        return walk(tree, p_rows, rng)

    counts = torch.zeros(V, V)
    torch.manual_seed(0)
    step.speculative_sampling = spy
    try:
        for _ in range(DRAWS):
            out = target.generate(
                PROMPT.to(device),
                do_sample=True,
                temperature=temperature,
                top_k=top_k or 0,
                top_p=1.0,
                max_new_tokens=4,
                eos_token_id=None,
                assistant_model=drafter,
            )
            a, b = out[0, PROMPT.shape[1] + 1 : PROMPT.shape[1] + 3].tolist()
            counts[a, b] += 1
    finally:
        step.speculative_sampling = walk
        hf_specdec.cost_model(target).reset()
    return counts, exact_joint(target, temperature, top_k), trees


_RUNS: dict = {}


def cached_run(name, drafter_cls=BlockDrafter, device=CPU):
    key = (name, drafter_cls, device.type)
    if key not in _RUNS:
        _RUNS[key] = run_case(name, drafter_cls, device)
    return _RUNS[key]


def excesses(counts, exact):
    return [
        distribution_excess(counts, exact, DELTA),
        distribution_excess(counts.sum(1), exact.sum(1), DELTA),
        distribution_excess(counts.sum(0), exact.sum(0), DELTA),
    ]


@pytest.mark.parametrize("name", list(CASES))
def test_new_tokens_are_distributed_exactly_as_plain_sampling(name, device):
    counts, exact, trees = cached_run(name, device=device)
    assert max(excesses(counts, exact)) <= 1.0, excesses(counts, exact)
    drafted = sum(1 for t in trees if len(t))
    if name == "adaptive, plain steps":
        assert len(trees) - drafted > DRAWS // 2  # most steps verified no draft
    else:
        assert drafted > DRAWS // 2  # drafts were really verified, not skipped


def test_q_handed_to_acceptance_at_another_temperature_is_caught():
    counts, exact, _ = cached_run("chain", WrongQDrafter)
    assert max(excesses(counts, exact)) > 1.0


def _pit(trees, transform=None):
    """Randomised PIT of every sampled node under the q handed to acceptance: U(0,1) iff each node ~ its q."""
    g = torch.Generator().manual_seed(5)
    values = []
    for tree in trees:
        if tree.q is None:  # a step with no room for drafter nodes
            continue
        q = tree.q if transform is None else transform(tree.q)
        for token, row in zip(tree.tokens, tree.q_of, strict=True):
            if row < 0:
                continue
            below = q[row, :token].sum()
            values.append(float(below + torch.rand((), generator=g) * q[row, token]))
    return torch.tensor(values)


@pytest.mark.parametrize(
    "name",
    [
        "chain",
        "siblings+lookup top-k",
        "dcoco walk",
        "dblast mixture",
        "adaptive budget",
        "pard siblings+lookup",
        "pard dcoco walk",
        "pard dblast mixture",
    ],
)
def test_q_handed_to_acceptance_is_the_distribution_drafts_were_drawn_from(name):
    _, _, trees = cached_run(name)
    values = _pit(trees)
    assert values.numel() > 1000
    assert dkw_uniform_excess(values, DELTA) <= 1.0
    sharpened = _pit(trees, lambda q: q**2 / (q**2).sum(-1, keepdim=True))  # negative control
    assert dkw_uniform_excess(sharpened, DELTA) > 1.0
