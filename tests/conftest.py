"""Tiny random targets built from config, and drafters with a known acceptance pattern.

`OracleDrafter` is a real `BlockDrafter`: every step still runs the drafter pass on the target's features, so
the generate() integration is exercised end to end. Only its proposal is replaced by the target's own greedy
continuation (`reference`), optionally corrupted at block position `corrupt_at`, so a step accepts all drafts,
none, or exactly `corrupt_at` of them.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

import hf_specdec
from hf_specdec import BlockDraftCandidateGenerator, BlockDrafter

# Measured step-cost curves stay in this process (tests never write ~/.cache); test_budget sets its own curves.
os.environ["HF_SPECDEC_CACHE"] = ""

# scripts/test.sh runs one pytest-xdist worker per core: each gets one torch thread, since tiny models gain nothing
# from more and two workers spinning two threads each on two cores stall one another.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

VOCAB = 256
MASK_ID = VOCAB - 1


# Every device present: CPU always, CUDA when there is one. Tests that take the `device` fixture (or a file's
# `target`/`prompt` fixtures built on it) run once per entry; ids end in -cpu / -cuda, so `-k cuda` picks the GPU
# runs (scripts/device_check.sh). A CPU-only machine runs each test once, as before.
DEVICES = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)


def tiny_target(
    arch: str = "llama", seed: int = 0, layers: int = 4, attn: str = "sdpa", vocab: int = VOCAB, device="cpu"
):
    """A random target built on the CPU from `seed` (the same weights on every device), then moved to `device`."""
    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        initializer_range=0.3,  # large weights: varied greedy text with clear argmax margins
    )
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common, attn_implementation=attn))
    elif arch == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**common, head_dim=16, attn_implementation=attn))
    else:
        raise ValueError(arch)
    return model.to(device).eval()


class OracleScores:
    """Scores peak on the reference continuation; at `corrupt_at` the reference ranks `reference_rank` (0 = top)."""

    def draft_scores(self, input_ids, k):
        hidden, _ = super().draft_scores(input_ids, k)  # the real drafter pass runs (features consumed, cache filled)
        ref, j = self.drafter.reference_for(input_ids)
        T = input_ids.shape[1]
        drafts = ref[0, T : T + k].tolist()
        drafts += [3] * (k - len(drafts))  # past the reference's end: any token
        logits = torch.zeros(k, self.vocab_size, device=hidden.device)
        for d, token in enumerate(drafts):
            logits[d, token] = 8.0
        rank = self.drafter.reference_rank
        if j is not None and j < k:
            for i in range(rank):  # `rank` wrong tokens score above the reference
                logits[j, (drafts[j] + 1 + i) % self.vocab_size] = 8.0 - 0.1 * i
            logits[j, drafts[j]] = 8.0 - 0.1 * rank
        if self.draft_vocab is not None:  # scores over the drafter's reduced vocabulary, like the real head
            logits = logits[:, self.draft_vocab.to(logits.device)]
        return hidden, logits


class OracleCandidateGenerator(OracleScores, BlockDraftCandidateGenerator):
    """A head on an oracle drafter reads the oracle's scores through `block_states` (the seam)."""


class OracleReference:
    """One reference continuation, or one per batch row (`references`, `corrupt_ats`): the row's is the one whose
    start matches the row's tokens (none matching: junk drafts, for calls whose text differs from the references)."""

    reference: torch.Tensor
    corrupt_at: int | None = None
    reference_rank: int = 1
    references: list | None = None
    corrupt_ats: list | None = None

    def reference_for(self, input_ids):
        if self.references is None:
            return self.reference, self.corrupt_at
        T = input_ids.shape[1]
        for ref, j in zip(self.references, self.corrupt_ats, strict=True):
            if ref.shape[1] >= T and torch.equal(ref[0, :T].to(input_ids.device), input_ids[0]):
                return ref, j
        return input_ids[:, :0].new_zeros(1, T), None  # the row left every reference: drafts are junk


class OracleDrafter(OracleReference, BlockDrafter):
    pass


class OracleDCOCODrafter:
    """An `OracleDrafter` carrying a DCOCO head (attached, as any head goes on any base)."""

    @classmethod
    def for_target(cls, target, **kwargs):
        return hf_specdec.attach_head(OracleDrafter.for_target(target, **kwargs), "dcoco")


hf_specdec.register_drafter_kind(OracleDrafter, OracleCandidateGenerator)


def saved_run_inputs(folder, sequences: int = 3, length: int = 40, drafter_cls=BlockDrafter):
    """A tiny target and a block-4 drafter saved under `folder`, plus a data file of `sequences` random token-id
    items (supervised from position 8): what the training scripts read. Returns the target."""
    target = tiny_target("llama")
    target.save_pretrained(folder / "target")
    make_drafter(target, 4, cls=drafter_cls).save_pretrained(folder / "drafter")
    g = torch.Generator().manual_seed(3)
    items = [{"ids": torch.randint(3, 250, (length,), generator=g).tolist(), "loss_start": 8} for _ in range(sequences)]
    (folder / "data.jsonl").write_text("\n".join(json.dumps(item) for item in items))
    return target


def assert_batch_and_server_equal_plain(target, drafter, prompts: list, new_tokens: int) -> None:
    """Left-padded batched generate and the server with `drafter` give every prompt ((T,) ids) plain greedy's tokens."""
    width, dev = max(len(p) for p in prompts), target.device
    prompts = [p.to(dev) for p in prompts]
    ids = torch.zeros(len(prompts), width, dtype=torch.long, device=dev)
    mask = torch.zeros(len(prompts), width, dtype=torch.long, device=dev)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :], mask[i, width - len(p) :] = p, 1
    plain = target.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False)
    out = target.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, plain)
    server = hf_specdec.SpeculativeServer(target, drafter, max_batch_size=2, do_sample=False)
    requests = [server.submit(p, new_tokens) for p in prompts]
    server.run()
    for request, p in zip(requests, prompts, strict=True):
        alone = target.generate(p[None], max_new_tokens=new_tokens, do_sample=False)[0].cpu()  # outputs: CPU
        assert torch.equal(request.output_ids, alone)


def fed_ids(target, prompt, new_tokens: int = 24, **kwargs) -> tuple[torch.Tensor, list[list[int]]]:
    """(greedy output ids, the ids of every target forward after the prefill): what was drafted, step by step."""
    fed: list[list[int]] = []
    handle = target.register_forward_pre_hook(
        lambda m, args, kw: fed.append(kw["input_ids"][0].tolist()), with_kwargs=True
    )
    try:
        out = target.generate(prompt, max_new_tokens=new_tokens, do_sample=False, **kwargs)
    finally:
        handle.remove()
    return out, fed[1:]


def make_drafter(target, block_size: int, cls=BlockDrafter, seed: int = 1, **kwargs):
    torch.manual_seed(seed)
    return cls.for_target(target, block_size=block_size, mask_token_id=MASK_ID, **kwargs).eval()


def oracle(target, prompt, block_size, corrupt_at, max_new_tokens, cls=None, **gen_kwargs):
    """An OracleDrafter whose reference is the target's greedy continuation (block_size tokens past the end), with
    fixed decoding sizes, so each step accepts exactly the pattern asked for (the adaptive budget's own identity
    tests set `budget="auto"`: tests/test_budget.py)."""
    drafter = make_drafter(target, block_size, cls=cls or OracleDrafter)
    ref_kwargs = {k: v for k, v in gen_kwargs.items() if k not in ("eos_token_id", "min_new_tokens")}
    drafter.reference = target.generate(
        prompt, max_new_tokens=max_new_tokens + block_size, do_sample=False, eos_token_id=None, **ref_kwargs
    )
    drafter.corrupt_at = corrupt_at
    drafter.decoding = hf_specdec.DecodingSettings(budget="fixed")  # every step drafts the whole block
    return drafter


@pytest.fixture(params=["llama", "qwen3"])
def target(request):
    return tiny_target(request.param)


@pytest.fixture
def prompt():
    g = torch.Generator().manual_seed(123)
    return torch.randint(3, VOCAB - 1, (1, 12), generator=g)
