"""Batches: every row of a drafted batched generate() equals plain batched generate(), whatever each row accepts."""

import pytest
import torch
from conftest import VOCAB, OracleDCOCODrafter, OracleDrafter, make_drafter, tiny_target

from hf_specdec import BlockDrafter, DBLASTDrafter, DCOCODrafter, DecodingSettings

LENGTHS = [12, 7, 10]


def batch_inputs(seed=5, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, VOCAB - 1, (n,), generator=g).to(device) for n in LENGTHS]
    width = max(LENGTHS)
    ids = torch.zeros(len(prompts), width, dtype=torch.long, device=device)
    mask = torch.zeros(len(prompts), width, dtype=torch.long, device=device)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :], mask[i, width - len(p) :] = p, 1
    return prompts, ids, mask


def batch_oracle(target, prompts, block_size, corrupt_ats, new_tokens, cls=OracleDrafter):
    """An oracle drafter that knows every row's greedy continuation and errs at that row's `corrupt_at`."""
    drafter = make_drafter(target, block_size, cls=cls)
    drafter.references = [
        target.generate(p[None], max_new_tokens=new_tokens + block_size, do_sample=False, eos_token_id=None)
        for p in prompts
    ]
    drafter.corrupt_ats = corrupt_ats
    return drafter


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("block_size", [2, 4])
@pytest.mark.parametrize("cls", [OracleDrafter, OracleDCOCODrafter])
@pytest.mark.parametrize(  # fixed sizes: the acceptance pattern is the test's, not the budget's (timing-driven) choice
    "settings",
    [DecodingSettings(budget="fixed"), DecodingSettings(budget="fixed", tree_budget=5)],
    ids=["chain", "tree"],
)
def test_rows_accepting_none_all_and_j_tokens_match_plain_batched_greedy(arch, block_size, cls, settings, device):
    target = tiny_target(arch, device=device).float()
    prompts, ids, mask = batch_inputs(device=device)
    expected = target.generate(ids, attention_mask=mask, max_new_tokens=14, do_sample=False)
    # row 0 accepts nothing (errs at slot 0), row 1 everything, row 2 exactly one draft per step
    drafter = batch_oracle(target, prompts, block_size, [0, None, 1], 14, cls)
    drafter.decoding = settings
    out = target.generate(ids, attention_mask=mask, max_new_tokens=14, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, expected)
    stats = drafter.last_acceptance_stats
    assert stats.verify_forwards > 0 and max(stats.accepted) == block_size - 1 and min(stats.accepted) == 0


def test_batch_statistics_count_real_target_forwards_and_row_steps_apart():
    """One forward verifies every row: target_forwards is what the target ran (counted by a hook), row_steps the
    rows it verified, and tau stays tokens committed per row step."""
    target = tiny_target("llama").float()
    prompts, ids, mask = batch_inputs()
    drafter = batch_oracle(target, prompts, 4, [0, None, 1], 14)  # rows accept none, all, one draft per step
    drafter.decoding = DecodingSettings(budget="fixed")  # no cost measurement: every forward is prefill or verify
    calls = []
    hook = target.register_forward_hook(lambda *_: calls.append(1))
    try:
        out = target.generate(ids, attention_mask=mask, max_new_tokens=14, do_sample=False, assistant_model=drafter)
    finally:
        hook.remove()
    stats = drafter.last_acceptance_stats
    assert stats.prefill_forwards == 1 and stats.target_forwards == len(calls)
    # after the prefill's token each row commits 13: row 0 one per forward (13 forwards, the batch's count),
    # row 1 four (4 forwards), row 2 two (7 forwards); rows that finish leave the batch
    assert out.shape[1] == ids.shape[1] + 14
    assert stats.verify_forwards == 13 and stats.row_steps == 13 + 4 + 7
    assert stats.committed_tokens == 3 * 13 and stats.tau == pytest.approx(3 * 13 / stats.row_steps)
    assert stats.to_dict()["row_steps"] == stats.row_steps


@pytest.mark.parametrize("kind", [None, DCOCODrafter, DBLASTDrafter])
def test_trained_kinds_and_rows_finishing_at_different_times(kind):
    target = tiny_target("llama").float()
    prompts, ids, mask = batch_inputs(seed=9)
    plain = target.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False)
    eos = int(plain[1, -6])  # row 1 (and maybe others) ends early on this token
    expected = target.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False, eos_token_id=eos)
    drafter = make_drafter(target, 4, **({"cls": kind} if kind else {}))
    out = target.generate(
        ids, attention_mask=mask, max_new_tokens=20, do_sample=False, eos_token_id=eos, assistant_model=drafter
    )
    assert torch.equal(out, expected)
    assert (out == 0).sum() > (ids == 0).sum()  # some row was padded after its EOS


def test_right_padding_is_refused():
    target = tiny_target("llama")
    _, ids, mask = batch_inputs()
    drafter = make_drafter(target, 4)
    with pytest.raises(ValueError, match="padding must be on the left"):
        target.generate(ids, attention_mask=mask.flip(1), max_new_tokens=4, assistant_model=drafter)


def exact_joint_after(target, prompt, temperature):
    """(V, V) P(new tokens 2 and 3) after `prompt` (1, T), summing over new token 1, at `temperature`."""
    V = target.config.vocab_size
    pairs = torch.cartesian_prod(torch.arange(V), torch.arange(V))  # (V*V, 2)
    seqs = torch.cat([prompt.expand(V * V, -1), pairs], dim=1)
    with torch.no_grad():
        probs = torch.softmax(target(seqs).logits[:, -3:].float() / temperature, dim=-1)  # (V*V, 3, V)
    p1, p2, p3 = probs[0, 0], probs[:, 1].view(V, V, V)[:, 0], probs[:, 2].view(V, V, V)
    return torch.einsum("a,ab,abc->bc", p1, p2, p3)


@pytest.mark.parametrize("kind", ["chain", "dblast"])
def test_sampling_each_row_is_distributed_as_plain_sampling(kind):
    """Two prompts of different lengths, each repeated in one left-padded batch: per prompt, the joint of new
    tokens 2 and 3 over 1000 rows matches the target's exact distribution (Bernstein bounds, false-failure
    probability 1e-6 per assertion, three assertions per prompt)."""
    from bounds import distribution_excess

    V, reps, calls = 8, 250, 4
    target = tiny_target("llama", vocab=V, layers=2)
    torch.manual_seed(3)
    drafter = BlockDrafter.for_target(target, block_size=3, mask_token_id=V - 1).eval()
    if kind == "dblast":
        drafter = DBLASTDrafter.from_block_drafter(drafter, mixture_components=3, mixture_rank=4).eval()
        torch.nn.init.normal_(drafter.mixture_head.up.weight, std=2.0)
    drafter.decoding = DecodingSettings(sample_branches=2)
    prompts = [torch.tensor([[1, 3, 4, 5, 3, 4, 6]]), torch.tensor([[2, 6, 5, 1]])]
    ids = torch.zeros(2 * reps, 7, dtype=torch.long)
    mask = torch.zeros(2 * reps, 7, dtype=torch.long)
    ids[:reps], mask[:reps] = prompts[0], 1
    ids[reps:, 3:], mask[reps:, 3:] = prompts[1], 1
    counts = torch.zeros(2, V, V)
    torch.manual_seed(0)
    for _ in range(calls):
        out = target.generate(
            ids,
            attention_mask=mask,
            do_sample=True,
            temperature=0.9,
            top_k=0,
            top_p=1.0,
            max_new_tokens=4,
            eos_token_id=None,
            pad_token_id=0,
            assistant_model=drafter,
        )
        for half in range(2):
            a, b = out[half * reps : (half + 1) * reps, 8:10].T
            counts[half].index_put_((a, b), torch.ones(reps), accumulate=True)
    assert drafter.last_acceptance_stats.verify_forwards > 0
    for half, prompt in enumerate(prompts):
        exact = exact_joint_after(target, prompt, 0.9)
        for c, e in [(counts[half], exact), (counts[half].sum(1), exact.sum(1)), (counts[half].sum(0), exact.sum(0))]:
            assert distribution_excess(c, e, 1e-6) <= 1.0


class Collect:
    """A streamer that keeps what it is given."""

    def __init__(self):
        self.tokens, self.ended = [], False

    def put(self, value):
        self.tokens.extend(value.reshape(-1).tolist())

    def end(self):
        self.ended = True


@pytest.mark.parametrize("cls", [OracleDrafter, OracleDCOCODrafter])
def test_server_requests_joining_and_leaving_get_their_own_greedy_text(cls, device):
    """Continuous batching: 5 requests of different lengths through a batch of at most 2; each output equals
    `target.generate` of that prompt alone, and its streamer got exactly its tokens."""
    from hf_specdec import SpeculativeServer

    target = tiny_target("llama", device=device).float()
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, VOCAB - 1, (n,), generator=g).to(device) for n in (9, 5, 12, 7, 6)]
    budgets = [10, 3, 14, 6, 9]
    drafter = batch_oracle(target, prompts, 4, [1, None, 0, 2, None], max(budgets), cls)
    server = SpeculativeServer(target, drafter, max_batch_size=2, do_sample=False)
    streams = [Collect() for _ in prompts]
    requests = [server.submit(p, b, s) for p, b, s in zip(prompts, budgets, streams, strict=True)]
    order = server.run()
    assert sorted(r.id for r in order) == list(range(5)) and not server.busy
    for request, prompt, budget, stream in zip(requests, prompts, budgets, streams, strict=True):
        alone = target.generate(prompt[None], max_new_tokens=budget, do_sample=False)[0].cpu()  # outputs: CPU
        assert torch.equal(request.output_ids, alone)
        assert stream.tokens == alone.tolist() and stream.ended
        assert request.latency >= 0 and request.started_at >= request.submitted_at


def test_length_and_history_processors_see_the_padded_rows_as_plain_batched_generate_does():
    """min_new_tokens and repetition_penalty depend on the (padded) row: drafted batches match plain ones."""
    target = tiny_target("llama").float()
    prompts, ids, mask = batch_inputs(seed=9)
    plain = target.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    eos = int(plain[1, -9])
    kwargs = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, eos_token_id=eos, min_new_tokens=5)
    kwargs["repetition_penalty"] = 1.5
    expected = target.generate(ids, **kwargs)
    out = target.generate(ids, **kwargs, assistant_model=batch_oracle(target, prompts, 4, [None, 1, 0], 12))
    assert torch.equal(out, expected)


def test_prompts_of_very_different_lengths_are_prefilled_apart_and_keep_their_greedy_text(device):
    """A left-padded prefill computes every prompt at the longest one's length; the server groups prompts of similar
    length (`length_groups`) and prefills the groups apart, so a long prompt costs the short ones nothing. Outputs
    still equal plain greedy of each prompt alone, as the rows of one batch (drafted together)."""
    from hf_specdec import SpeculativeServer
    from hf_specdec.models.padding import length_groups

    assert length_groups([115, 257, 95, 105]) == [[2, 3, 0], [1]]  # 4 x 257 positions for 572 real ones: apart
    assert length_groups([8, 9, 8, 10]) == [[0, 2, 1, 3]]  # a few padded slots cost less than another forward
    assert length_groups([]) == []
    target = tiny_target("llama", device=device).float()
    g = torch.Generator().manual_seed(12)
    prompts = [torch.randint(3, VOCAB - 1, (n,), generator=g).to(device) for n in (6, 150, 9)]
    drafter = batch_oracle(target, prompts, 4, [1, None, 0], 12, OracleDrafter)
    server = SpeculativeServer(target, drafter, max_batch_size=3, do_sample=False)
    requests = [server.submit(p, 12) for p in prompts]
    server.step()
    assert server.batch.forwards.prefill == 2 and len(server.running) == 3  # two prefills, one batch
    server.run()
    for request, prompt in zip(requests, prompts, strict=True):
        alone = target.generate(prompt[None], max_new_tokens=12, do_sample=False)[0].cpu()
        assert torch.equal(request.output_ids, alone)
