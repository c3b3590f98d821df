"""Synthetic step benchmark for a GPU: random-weight targets with real model shapes, drafters that accept a forced
number of tokens per step. Nothing is downloaded: the shapes are written below as config dicts.

A *forced target* is a random model whose greedy next token is always its input token: its embedding rows are
scaled up (so the residual stream stays close to the input token's embedding through every random layer) and its
LM head is that same embedding, so every logit row peaks at the token it was fed (bf16 margins of about 10x).
A `ForcedDrafter` is a real `BlockDrafter` (its pass and the LM head over its hidden states run every step, as in
a real run); only its proposal is replaced: the anchor token repeated, wrong from block position `accept` on, with
the right token never among the alternatives a tree could add. Each step then commits exactly `accept` drafts
plus one bonus token: tau = accept + 1 (measured and reported next to the forced value).

Timed, per model shape, attention implementation (sdpa or flex_attention) and batch size:
  plain   per-token time of plain greedy `generate()` (two calls, their difference over the extra tokens)
  chain   one `speculative_step` (hf_specdec's step: draft, verify, accept, keep) with an argmax chain
  tree    the same with a best-first tree of `budget` nodes (SDPA bool mask or flex-attention BlockMask)
Rows: step milliseconds (median), measured tau, tokens/s and the speedup over plain at the same batch and attention.
Batched steps need a per-row mask (sdpa): flex cases run with batch 1 only.
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
from hf_specdec import BlockDraftCandidateGenerator, BlockDrafter, DecodingSettings
from hf_specdec.bench.environment import environment
from hf_specdec.decoding.batch import SpeculativeBatch
from hf_specdec.decoding.step import speculative_step

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
}
EMBED_STD = 64.0  # residual signal of the input token vs about 12 per entry added by 36 random layers
PEAK = 30.0  # the drafter's score of its proposal: e^30 outweighs any vocabulary, so a tree takes the chain first
PROMPT_TOKENS = 128


@dataclass(frozen=True)
class Case:
    """One row of the grid."""

    model: str
    attn: str  # sdpa | flex_attention
    batch: int
    method: str  # plain | chain | tree
    block: int = 0  # drafter block size K (K - 1 drafts per chain)
    budget: int = 0  # tree nodes (0 = chain)
    tau: int = 0  # forced tokens per step: tau - 1 accepted drafts + the bonus token


class ForcedDrafter(BlockDrafter):
    """A block drafter whose proposals `ForcedCandidateGenerator` replaces; `accept` drafts per step are right."""

    accept: int = 0


class ForcedCandidateGenerator(BlockDraftCandidateGenerator):
    """Runs the real drafter pass and head, then scores the anchor token (what a forced target emits) on top at
    positions before `accept`, and a wrong token on top (the right one at the bottom) from `accept` on."""

    def draft_scores(self, input_ids: torch.LongTensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, real = super().draft_scores(input_ids, k)  # (k + 1, H), (k, Vd)
        anchor = input_ids[0, -1].to(real.device)
        right = min(self.drafter.accept, k)
        logits = torch.zeros_like(real, dtype=torch.float32)  # (k, Vd)
        tokens = anchor.repeat(k)  # (k,)
        tokens[right:] = (anchor + 1) % real.shape[-1]
        logits[torch.arange(k, device=real.device), tokens] = PEAK
        logits[right:, anchor] = -PEAK
        return hidden, logits


hf_specdec.register_drafter_kind(ForcedDrafter, ForcedCandidateGenerator)


def forced_target(shape: str, attn: str, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """A random-weight model of `SHAPES[shape]` on `device` whose greedy next token is its input token."""
    fields = dict(SHAPES[shape])
    config = AutoConfig.for_model(fields.pop("model_type"), **fields, attn_implementation=attn)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _prompts(target, batch: int) -> torch.LongTensor:
    """(batch, PROMPT_TOKENS) random ids on the target's device."""
    g = torch.Generator().manual_seed(batch)
    return torch.randint(3, target.config.vocab_size - 1, (batch, PROMPT_TOKENS), generator=g).to(target.device)


def time_plain(target, batch: int, steps: int) -> dict:
    """Per-token ms of plain greedy `generate()`: (t(2 + steps) - t(2)) / steps, after one warm-up call."""
    ids = _prompts(target, batch)
    kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, eos_token_id=None, pad_token_id=0)
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


def time_speculative(target, drafter: ForcedDrafter, case: Case, steps: int, warmup: int = 2) -> dict:
    """Median ms of `steps` speculative steps over a batch of `case.batch` prompts (after `warmup` steps)."""
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
    return {"step_ms": step_ms, "measured_tau": tau, "tokens_per_s": 1000 * case.batch * tau / step_ms}


def grid(models: list[str], small: bool, flex: bool) -> list[Case]:
    """The cases, most informative first, so a deadline cuts the least: for every model, plain and chains at batch
    1; then trees at batch 1; then batches 8 and 32; then flex-attention masks (batch 1). `small`: a handful."""
    if small:
        m = models[0]
        cases = [Case(m, "sdpa", 1, "plain"), Case(m, "sdpa", 2, "plain")]
        cases += [Case(m, "sdpa", 1, "chain", 8, 0, t) for t in (1, 8)]
        cases += [Case(m, "sdpa", 1, "tree", 8, 16, 4), Case(m, "sdpa", 2, "chain", 8, 0, 4)]
        cases += [Case(m, "sdpa", 2, "tree", 8, 8, 4)]
        if flex:
            cases += [Case(m, "flex_attention", 1, "plain"), Case(m, "flex_attention", 1, "tree", 8, 8, 4)]
        return cases
    shapes = [(0, "chain"), (8, "tree"), (16, "tree"), (32, "tree")]
    tiers = [
        lambda m: (
            [Case(m, "sdpa", 1, "plain")] + [Case(m, "sdpa", 1, "chain", k, 0, t) for k in (8, 16) for t in range(1, 9)]
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


def measure(
    cases: list[Case], device: torch.device, dtype: torch.dtype, steps: int, deadline: float
) -> tuple[list, list, list]:
    """Run `cases` in order until `deadline` (time.monotonic()); returns (rows, cases left out, cases that raised,
    with the error: one failing case, out of memory say, does not end a one-shot run). One target is built per
    (model, attention) run of cases, one drafter per block size."""
    rows, left, failed = [], [], []
    key, target, drafters = None, None, {}
    for case in cases:
        if time.monotonic() > deadline:
            left.append(asdict(case))
            continue
        try:
            if key != (case.model, case.attn):
                key, target, drafters = None, None, {}
                gc.collect()  # the previous target's memory is free before the next one is built
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                target = forced_target(case.model, case.attn, device, dtype)
                key = (case.model, case.attn)
            if case.method == "plain":
                result = time_plain(target, case.batch, steps)
            else:
                if case.block not in drafters:
                    drafters[case.block] = forced_drafter(target, case.block)
                result = time_speculative(target, drafters[case.block], case, steps)
        except Exception as error:  # recorded and reported; the next case runs
            failed.append({**asdict(case), "error": f"{type(error).__name__}: {error}"[:500]})
            continue
        rows.append({**asdict(case), **result})
    return rows, left, failed


def with_speedups(rows: list[dict]) -> list[dict]:
    """Each row's tokens/s over plain's at the same model, attention and batch (None when plain was not timed)."""
    plain = {(r["model"], r["attn"], r["batch"]): r["tokens_per_s"] for r in rows if r["method"] == "plain"}
    for r in rows:
        base = plain.get((r["model"], r["attn"], r["batch"]))
        r["speedup"] = r["tokens_per_s"] / base if base else None
    return rows


COLUMNS = ["model", "attn", "batch", "method", "block", "budget", "tau", "measured_tau", "step_ms", "tok/s", "speedup"]


def table(rows: list[dict]) -> str:
    """One Markdown table of every row."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = [r["model"], r["attn"], r["batch"], r["method"], r["block"] or "", r["budget"] or "", r["tau"] or ""]
        cells += [f"{r['measured_tau']:.2f}", f"{r['step_ms']:.2f}", f"{r['tokens_per_s']:.0f}"]
        cells.append(f"{r['speedup']:.2f}" if r["speedup"] is not None else "")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def run(device: str, small: bool, out: str | Path, budget_s: float, dtype: str = "bfloat16", steps: int = 0) -> dict:
    """Time the grid on `device` (bf16 by default) until `budget_s` seconds have passed, write JSON to `out`,
    print the table; returns the JSON dict. `small`: the tiny shape and a few cases (a CPU check of this code)."""
    dev = torch.device(device)
    torch_dtype = getattr(torch, dtype)
    models = ["tiny"] if small else ["qwen2.5-1.5b", "qwen3-8b"]
    steps = steps or (3 if small else 6)
    deadline = time.monotonic() + budget_s
    rows, left, failed = measure(grid(models, small, flex=dev.type == "cuda"), dev, torch_dtype, steps, deadline)
    result = {
        "device": str(dev),
        "dtype": dtype,
        "prompt_tokens": PROMPT_TOKENS,
        "timed_steps": steps,
        **environment(),  # machine (GPU name included) and versions
        "rows": with_speedups(rows),
        "left_out_by_deadline": left,
        "failed": failed,
    }
    print(table(result["rows"]))
    for case in failed:
        print(f"FAILED {case}")
    if left:
        print(f"{len(left)} cases left out: the {budget_s:.0f} s budget ran out")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return result


__all__ = ["SHAPES", "Case", "ForcedCandidateGenerator", "ForcedDrafter", "forced_target", "grid", "run", "table"]
