"""Synthetic step benchmark for a GPU: random-weight targets with real model shapes, drafters that accept a forced
number of tokens per step. Nothing is downloaded: the shapes are written below as config dicts.

A *forced target* is a random model whose greedy next token is always its input token: its embedding rows are
scaled up (so the residual stream stays close to the input token's embedding through every random layer) and its
LM head is that same embedding, so every logit row peaks at the token it was fed (bf16 margins of about 10x).
A `ForcedDrafter` is a real `BlockDrafter` (its pass and the LM head over its hidden states run every step, as in
a real run); only its proposal is replaced: the anchor token repeated, wrong from block position `accept` on, with
the right token never among the alternatives a tree could add. Each step then commits exactly `accept` drafts
plus one bonus token: tau = accept + 1 (measured and reported next to the forced value).
A `ForcedPardDrafter` does the same over a real PARD drafter (`PardDrafter.from_causal_lm` over a random causal LM
of the drafter's real shape, `PARD_LM`: Qwen2.5-0.5B for Qwen2.5-1.5B, Qwen3-0.6B for Qwen3-8B): "pard" reads
tokens only, "pard2" also injects the target's features (PARD-2: taps `pard2_layers`, a random projection). One
LM per target serves every PARD drafter of it.

Timed, per model shape, drafter, attention implementation (sdpa or flex_attention) and batch size:
  plain   per-token time of plain greedy `generate()` (two calls, their difference over the extra tokens)
  chain   one `speculative_step` (hf_specdec's step: draft, verify, accept, keep) with an argmax chain
  tree    the same with a best-first tree of `budget` nodes (SDPA bool mask or flex-attention BlockMask)
Rows: step milliseconds (median), measured tau, tokens/s and the speedup over plain at the same batch and attention.
Batched steps need a per-row mask (sdpa): flex cases run with batch 1 only.

Greedy agreement (method "agree", first for every model): bf16 `target.generate(do_sample=False,
max_new_tokens=32)` with and without `assistant_model` on the forced target (its greedy tokens win by wide bf16
margins, so any difference is a decoding error, not a near tie), for real random PARD and PARD-2 drafters (their
drafts are rejected: the rejection path) and forced ones (tau 4: partial acceptance); a chain runs in transformers'
loop, a tree (`budget` 16) in hf_specdec's. Reported: identical or not, the share of equal new tokens, tau.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

import hf_specdec
from hf_specdec import BlockDraftCandidateGenerator, BlockDrafter, DecodingSettings, PardConfig, PardDrafter
from hf_specdec.bench.environment import environment
from hf_specdec.decoding.batch import SpeculativeBatch
from hf_specdec.decoding.step import speculative_step
from hf_specdec.models.pard.generation_pard import PardCandidateGenerator

# Shapes of the real models (their config.json architecture fields); weights are random.
SHAPES = {
    "qwen2.5-1.5b": dict(
        model_type="qwen2",
        vocab_size=151936,
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "qwen3-8b": dict(
        model_type="qwen3",
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    ),
    "qwen2.5-0.5b": dict(  # PARD's drafter LM for Qwen2.5-1.5B
        model_type="qwen2",
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "qwen3-0.6b": dict(  # PARD's drafter LM for Qwen3-8B
        model_type="qwen3",
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "tiny": dict(  # --small: seconds on a CPU
        model_type="qwen3",
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
    ),
    "tiny-lm": dict(  # --small: the tiny target's PARD drafter LM
        model_type="qwen2",
        vocab_size=512,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    ),
}
PARD_LM = {"qwen2.5-1.5b": "qwen2.5-0.5b", "qwen3-8b": "qwen3-0.6b", "tiny": "tiny-lm"}  # target -> drafter LM
PARD_KINDS = {"pard": "PARD (tokens only)", "pard2": "PARD-2 (target features injected)"}
EMBED_STD = 64.0  # residual signal of the input token vs about 12 per entry added by 36 random layers
PEAK = 30.0  # the drafter's score of its proposal: e^30 outweighs any vocabulary, so a tree takes the chain first
PROMPT_TOKENS = 128
AGREE_NEW_TOKENS = 32  # new tokens of every greedy agreement check
# (drafter, tree budget, forced tau) of the agreement checks: tau 0 is a real random drafter (drafts rejected)
AGREEMENT = [("pard", 0, 0), ("pard2", 0, 0), ("pard2", 16, 0), ("pard", 0, 4), ("pard2", 16, 4), ("block", 0, 4)]


@dataclass(frozen=True)
class Case:
    """One row of the grid."""

    model: str
    attn: str  # sdpa | flex_attention
    batch: int
    method: str  # plain | chain | tree | agree (greedy agreement with plain `generate()`)
    block: int = 0  # drafter block size K (K - 1 drafts per chain)
    budget: int = 0  # tree nodes (0 = chain)
    tau: int = 0  # forced tokens per step: tau - 1 accepted drafts + the bonus token (agree: 0 = not forced)
    drafter: str = "block"  # block (ForcedDrafter) | pard | pard2 (over the random LM of PARD_LM[model])


def forced_scores(input_ids: torch.LongTensor, real: torch.Tensor, accept: int, k: int) -> torch.Tensor:
    """(k, Vd) scores in place of the drafter's `real` ones: the anchor token (what a forced target emits) on top at
    positions before `accept`, and a wrong token on top (the right one at the bottom) from `accept` on."""
    anchor = input_ids[0, -1].to(real.device)
    right = min(accept, k)
    logits = torch.zeros_like(real, dtype=torch.float32)  # (k, Vd)
    tokens = anchor.repeat(k)  # (k,)
    tokens[right:] = (anchor + 1) % real.shape[-1]
    logits[torch.arange(k, device=real.device), tokens] = PEAK
    logits[right:, anchor] = -PEAK
    return logits


class ForcedScores:
    """A candidate generator mixin: the real drafter pass and head run (`super().draft_scores`), then their scores
    are replaced by `forced_scores` for the drafter's `accept`."""

    def draft_scores(self, input_ids: torch.LongTensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, real = super().draft_scores(input_ids, k)  # hidden states, (k, Vd)
        return hidden, forced_scores(input_ids, real, self.drafter.accept, k)


class ForcedDrafter(BlockDrafter):
    """A block drafter whose proposals `ForcedCandidateGenerator` replaces; `accept` drafts per step are right."""

    accept: int = 0


class ForcedCandidateGenerator(ForcedScores, BlockDraftCandidateGenerator):
    """Runs the real block drafter pass and head, then forces the scores (`forced_scores`)."""


class ForcedPardDrafter(PardDrafter):
    """A PARD drafter whose proposals `ForcedPardGenerator` replaces; `accept` drafts per step are right."""

    accept: int = 0


class ForcedPardGenerator(ForcedScores, PardCandidateGenerator):
    """Runs the real PARD pass (one row's, or its share of a batch's `draft_rows` pass) and its LM head, then forces
    the scores (`forced_scores`)."""


hf_specdec.register_drafter_kind(ForcedDrafter, ForcedCandidateGenerator)
hf_specdec.register_drafter_kind(ForcedPardDrafter, ForcedPardGenerator, config_class=PardConfig)


def random_model(shape: str, device: torch.device, dtype: torch.dtype, attn: str = "sdpa", seed: int = 0):
    """A random-weight causal LM of `SHAPES[shape]` on `device`, in eval mode."""
    fields = dict(SHAPES[shape])
    config = AutoConfig.for_model(fields.pop("model_type"), **fields, attn_implementation=attn)
    torch.manual_seed(seed)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


def forced_target(shape: str, attn: str, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """A random-weight model of `SHAPES[shape]` on `device` whose greedy next token is its input token."""
    model = random_model(shape, device, dtype, attn)
    with torch.no_grad():
        embed = model.get_input_embeddings().weight
        embed.normal_(std=EMBED_STD)
        head = model.get_output_embeddings().weight
        if head.data_ptr() != embed.data_ptr():
            head.copy_(embed)
    return model


def forced_drafter(target: torch.nn.Module, block: int) -> ForcedDrafter:
    """A fresh drafter of `block` on the target's device and dtype."""
    torch.manual_seed(1)
    with torch.device(target.device):
        return ForcedDrafter.for_target(target, block_size=block, mask_token_id=0).eval()


def pard2_layers(num_layers: int) -> list[int]:
    """PARD-2's target taps (AMD's [-1, -8, -16, -24]), or the last four layers of a shallower target."""
    if num_layers >= 24:
        return [-1, -8, -16, -24]
    return [-1 - i for i in range(min(4, num_layers))]


def pard_drafter(target, lm, kind: str, block: int, forced: bool) -> PardDrafter:
    """A PARD ("pard") or PARD-2 ("pard2") drafter over `lm` (its weights shared, not copied) for `target`; the
    mask token is the LM's last id. PARD-2's projection is random (a trained one is not zero either)."""
    cls = ForcedPardDrafter if forced else PardDrafter
    extra = {}
    if kind == "pard2":
        extra = dict(feature_injection=True, target_layer_ids=pard2_layers(target.config.num_hidden_layers))
    mask = lm.config.vocab_size - 1
    drafter = cls.from_causal_lm(lm, target, mask_token_id=mask, block_size=block, **extra)
    if drafter.feature_proj is not None:
        torch.manual_seed(3)
        with torch.no_grad():
            drafter.feature_proj.weight.normal_(std=0.02)
    return drafter.eval()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _prompts(target, batch: int) -> torch.LongTensor:
    """(batch, PROMPT_TOKENS) random ids on the target's device."""
    g = torch.Generator().manual_seed(batch)
    return torch.randint(3, target.config.vocab_size - 1, (batch, PROMPT_TOKENS), generator=g).to(target.device)


def _greedy_kwargs(ids: torch.LongTensor) -> dict:
    return dict(attention_mask=torch.ones_like(ids), do_sample=False, eos_token_id=None, pad_token_id=0)


def time_plain(target, batch: int, steps: int) -> dict:
    """Per-token ms of plain greedy `generate()`: (t(2 + steps) - t(2)) / steps, after one warm-up call."""
    ids = _prompts(target, batch)
    kwargs = _greedy_kwargs(ids)
    target.generate(ids, max_new_tokens=2, **kwargs)
    seconds = []
    for new in (2, 2 + steps):
        _sync(target.device)
        start = time.perf_counter()
        target.generate(ids, max_new_tokens=new, **kwargs)  # no EOS: exactly `new` tokens
        _sync(target.device)
        seconds.append(time.perf_counter() - start)
    step_ms = 1000 * (seconds[1] - seconds[0]) / steps
    return {"step_ms": step_ms, "measured_tau": 1.0, "tokens_per_s": 1000 * batch / step_ms}


def time_speculative(target, drafter, case: Case, steps: int, warmup: int = 2) -> dict:
    """Median ms of `steps` speculative steps over a batch of `case.batch` prompts (after `warmup` steps), with the
    fastest and slowest step and every step's ms: on a GPU a few steps can take several times the rest, and a median
    of few steps then lands between the two."""
    drafter.accept = case.tau - 1
    drafter.decoding = DecodingSettings(budget="fixed", tree_budget=case.budget, tree_topk=4)
    config = GenerationConfig(do_sample=False, eos_token_id=None, pad_token_id=0)
    batch = SpeculativeBatch(target, drafter, config)
    limit = PROMPT_TOKENS + (warmup + steps + 2) * case.block  # room for a whole block at every step
    rows = batch.add(list(_prompts(target, case.batch)), [limit] * case.batch)
    times = []
    for i in range(warmup + steps):
        _sync(target.device)
        start = time.perf_counter()
        speculative_step(batch)
        _sync(target.device)
        if i >= warmup:
            times.append(1000 * (time.perf_counter() - start))
    accepted = [a for row in rows for a in row.generator.stats.accepted[warmup:]]
    tau = 1 + sum(accepted) / len(accepted)
    step_ms = statistics.median(times)
    return {
        "step_ms": step_ms,
        "step_ms_min": min(times),
        "step_ms_max": max(times),
        "steps_ms": [round(t, 2) for t in times],
        "measured_tau": tau,
        "tokens_per_s": 1000 * case.batch * tau / step_ms,
    }


def plain_reference(target) -> torch.LongTensor:
    """(1, PROMPT_TOKENS + AGREE_NEW_TOKENS) plain greedy `generate()` of the batch-1 prompt."""
    ids = _prompts(target, 1)
    return target.generate(ids, max_new_tokens=AGREE_NEW_TOKENS, **_greedy_kwargs(ids))


def check_agreement(target, drafter, case: Case, reference: torch.LongTensor) -> dict:
    """Greedy `generate()` of the batch-1 prompt with `drafter` as `assistant_model` (a forced one accepting
    `case.tau - 1` drafts per step; a chain in transformers' loop, a tree of `case.budget` nodes in hf_specdec's)
    against `reference`, plain greedy's output: identical or not, the share of the plain run's new tokens it
    matches position by position, its tau and wall milliseconds."""
    if case.tau:
        drafter.accept = case.tau - 1
    drafter.decoding = DecodingSettings(budget="fixed", tree_budget=case.budget, tree_topk=4)
    ids = _prompts(target, 1)
    _sync(target.device)
    start = time.perf_counter()
    out = target.generate(ids, max_new_tokens=AGREE_NEW_TOKENS, assistant_model=drafter, **_greedy_kwargs(ids))
    _sync(target.device)
    ms = 1000 * (time.perf_counter() - start)
    new, plain = out[0, PROMPT_TOKENS:].cpu(), reference[0, PROMPT_TOKENS:].cpu()
    n = min(len(new), len(plain))
    return {
        "identical": bool(torch.equal(out.cpu(), reference.cpu())),
        "equal_share": int((new[:n] == plain[:n]).sum()) / max(len(plain), 1),
        "new_tokens": len(new),
        "measured_tau": drafter.last_acceptance_stats.tau,
        "generate_ms": ms,
    }


def _agreement_cases(m: str) -> list[Case]:
    return [Case(m, "sdpa", 1, "agree", 8, n, t, d) for d, n, t in AGREEMENT]


def grid(models: list[str], small: bool, flex: bool) -> list[Case]:
    """The cases, most informative first, so a deadline cuts the least: for every model, the greedy agreement
    checks (cheap), plain and block-drafter chains at batch 1, then PARD and PARD-2 chains at batch 1; then trees
    at batch 1; then batches 8 and 32 (PARD and PARD-2 at 8); then flex-attention masks (batch 1). `small`: a
    handful, every drafter kind among them."""
    if small:
        m = models[0]
        cases = _agreement_cases(m) + [Case(m, "sdpa", 1, "plain"), Case(m, "sdpa", 2, "plain")]
        cases += [Case(m, "sdpa", 1, "chain", 8, 0, t) for t in (1, 8)]
        cases += [Case(m, "sdpa", 1, "chain", 8, 0, t, "pard") for t in (1, 8)]
        cases += [Case(m, "sdpa", 1, "chain", 8, 0, 4, "pard2")]
        cases += [Case(m, "sdpa", 1, "tree", 8, 16, 4), Case(m, "sdpa", 2, "chain", 8, 0, 4)]
        cases += [Case(m, "sdpa", 2, "tree", 8, 8, 4), Case(m, "sdpa", 2, "chain", 8, 0, 4, "pard2")]
        if flex:
            cases += [Case(m, "flex_attention", 1, "plain"), Case(m, "flex_attention", 1, "tree", 8, 8, 4)]
        return cases
    shapes = [(0, "chain"), (8, "tree"), (16, "tree"), (32, "tree")]
    tiers = [
        lambda m: (
            _agreement_cases(m)
            + [Case(m, "sdpa", 1, "plain")]
            + [Case(m, "sdpa", 1, "chain", k, 0, t) for k in (8, 16) for t in range(1, 9)]
            + [Case(m, "sdpa", 1, "chain", 8, 0, t, d) for d in PARD_KINDS for t in range(1, 9)]
        ),
        lambda m: [Case(m, "sdpa", 1, "tree", k, n, t) for k in (8, 16) for n in (8, 16, 32) for t in range(1, 9)],
        lambda m: (
            [Case(m, "sdpa", b, "plain") for b in (8, 32)]
            + [
                Case(m, "sdpa", b, method, k, n, t)
                for b in (8, 32)
                for k in (8, 16)
                for n, method in shapes
                for t in (1, 4, 8)
            ]
            + [Case(m, "sdpa", 8, "chain", 8, 0, t, d) for d in PARD_KINDS for t in (1, 4, 8)]
        ),
        lambda m: (
            [Case(m, "flex_attention", 1, "plain")]
            + [
                Case(m, "flex_attention", 1, method, k, n, t)
                for k in (8, 16)
                for n, method in shapes
                for t in (1, 4, 8)
            ]
        ),
    ]
    return [case for tier in tiers[: 4 if flex else 3] for m in models for case in tier(m)]


class _Models:
    """The models of one (target shape, attention) run of cases: the forced target, built first; the rest on first
    use: the block drafters (one per block size), the PARD LM (one, shared by every PARD drafter of this target),
    the PARD drafters (one per kind, block and forced or not) and plain greedy's reference output."""

    def __init__(self, case: Case, device: torch.device, dtype: torch.dtype) -> None:
        self.key, self.device, self.dtype = (case.model, case.attn), device, dtype
        self.target = forced_target(case.model, case.attn, device, dtype)
        self.drafters: dict[tuple, torch.nn.Module] = {}
        self.lm = None
        self.reference = None

    def drafter(self, case: Case, forced: bool = True):
        key = (case.drafter, case.block, forced)
        if key not in self.drafters:
            if case.drafter == "block":
                self.drafters[key] = forced_drafter(self.target, case.block)
            else:
                if self.lm is None:
                    self.lm = random_model(PARD_LM[case.model], self.device, self.dtype, seed=2)
                self.drafters[key] = pard_drafter(self.target, self.lm, case.drafter, case.block, forced)
        return self.drafters[key]

    def plain_reference(self) -> torch.LongTensor:
        if self.reference is None:
            self.reference = plain_reference(self.target)
        return self.reference


def measure(
    cases: list[Case], device: torch.device, dtype: torch.dtype, steps: int, deadline: float
) -> tuple[list, list, list, list]:
    """Run `cases` in order until `deadline` (time.monotonic()); returns (timed rows, agreement rows, cases left
    out, cases that raised, with the error: one failing case, out of memory say, does not end a one-shot run). One
    target is built per (model, attention) run of cases, one drafter per kind and block size (`_Models`)."""
    rows, agreement, left, failed = [], [], [], []
    models = None
    for case in cases:
        if time.monotonic() > deadline:
            left.append(asdict(case))
            continue
        try:
            if models is None or models.key != (case.model, case.attn):
                models = None
                gc.collect()  # the previous target's memory is free before the next one is built
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                models = _Models(case, device, dtype)
            draft_model = PARD_LM[case.model] if case.drafter != "block" else ""
            if case.method == "agree":
                drafter = models.drafter(case, forced=case.tau > 0)
                result = check_agreement(models.target, drafter, case, models.plain_reference())
                agreement.append({**asdict(case), "draft_model": draft_model, **result})
                continue
            if case.method == "plain":
                result = time_plain(models.target, case.batch, steps)
            else:
                result = time_speculative(models.target, models.drafter(case), case, steps)
        except Exception as error:  # recorded and reported; the next case runs
            failed.append({**asdict(case), "error": f"{type(error).__name__}: {error}"[:500]})
            continue
        rows.append({**asdict(case), "draft_model": draft_model, **result})
    return rows, agreement, left, failed


def with_speedups(rows: list[dict]) -> list[dict]:
    """Each row's tokens/s over plain's at the same model, attention and batch (None when plain was not timed)."""
    plain = {(r["model"], r["attn"], r["batch"]): r["tokens_per_s"] for r in rows if r["method"] == "plain"}
    for r in rows:
        base = plain.get((r["model"], r["attn"], r["batch"]))
        r["speedup"] = r["tokens_per_s"] / base if base else None
    return rows


COLUMNS = [
    "model",
    "drafter",
    "attn",
    "batch",
    "method",
    "block",
    "budget",
    "tau",
    "measured_tau",
    "step_ms",
    "min..max ms",
    "tok/s",
    "speedup",
]
AGREEMENT_COLUMNS = ["model", "drafter", "decoding", "forced tau", "identical", "equal share", "tau", "ms"]


def _drafter_name(r: dict) -> str:
    """The drafter column: "-" for plain rows, "block", or the PARD kind with its LM's shape."""
    if r["method"] == "plain":
        return "-"
    return f"{r['drafter']} ({r['draft_model']})" if r["draft_model"] else r["drafter"]


def table(rows: list[dict]) -> str:
    """One Markdown table of every timed row."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = [r["model"], _drafter_name(r), r["attn"], r["batch"], r["method"], r["block"] or "", r["budget"] or ""]
        spread = f"{r['step_ms_min']:.1f}..{r['step_ms_max']:.1f}" if "step_ms_min" in r else ""
        cells += [r["tau"] or "", f"{r['measured_tau']:.2f}", f"{r['step_ms']:.2f}", spread, f"{r['tokens_per_s']:.0f}"]
        cells.append(f"{r['speedup']:.2f}" if r["speedup"] is not None else "")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def agreement_table(rows: list[dict]) -> str:
    """One Markdown table of the greedy agreement checks."""
    lines = ["| " + " | ".join(AGREEMENT_COLUMNS) + " |", "|" + "---|" * len(AGREEMENT_COLUMNS)]
    for r in rows:
        decoding = f"tree {r['budget']} (hf_specdec's loop)" if r["budget"] else "chain (transformers' loop)"
        cells = [r["model"], _drafter_name(r), decoding, r["tau"] or "real drafter"]
        cells += ["yes" if r["identical"] else "NO", f"{r['equal_share']:.3f}", f"{r['measured_tau']:.2f}"]
        cells.append(f"{r['generate_ms']:.0f}")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def run(device: str, small: bool, out: str | Path, budget_s: float, dtype: str = "bfloat16", steps: int = 0) -> dict:
    """Time the grid on `device` (bf16 by default) until `budget_s` seconds have passed, write JSON to `out`,
    print the tables; returns the JSON dict (`disagreed`: the agreement checks whose output differed from plain
    greedy's). `small`: the tiny shapes and a few cases (a CPU check of this code)."""
    dev = torch.device(device)
    torch_dtype = getattr(torch, dtype)
    models = ["tiny"] if small else ["qwen2.5-1.5b", "qwen3-8b"]
    steps = steps or (3 if small else 12)
    deadline = time.monotonic() + budget_s
    cases = grid(models, small, flex=dev.type == "cuda")
    rows, agreement, left, failed = measure(cases, dev, torch_dtype, steps, deadline)
    result = {
        "device": str(dev),
        "dtype": dtype,
        "prompt_tokens": PROMPT_TOKENS,
        "timed_steps": steps,
        "agree_new_tokens": AGREE_NEW_TOKENS,
        "pard_lm": {m: PARD_LM[m] for m in models},
        **environment(),  # machine (GPU name included) and versions
        "agreement": agreement,
        "disagreed": [r for r in agreement if not r["identical"]],
        "rows": with_speedups(rows),
        "left_out_by_deadline": left,
        "failed": failed,
    }
    print(f"greedy agreement with plain generate(), {dtype}, {AGREE_NEW_TOKENS} new tokens, forced target:")
    print(agreement_table(agreement))
    print(table(result["rows"]))
    for r in result["disagreed"]:
        print(f"DISAGREED {r}")
    for case in failed:
        print(f"FAILED {case}")
    if left:
        print(f"{len(left)} cases left out: the {budget_s:.0f} s budget ran out")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return result


__all__ = [
    "PARD_LM",
    "SHAPES",
    "Case",
    "ForcedCandidateGenerator",
    "ForcedDrafter",
    "ForcedPardDrafter",
    "ForcedPardGenerator",
    "forced_target",
    "grid",
    "pard_drafter",
    "run",
    "table",
]
