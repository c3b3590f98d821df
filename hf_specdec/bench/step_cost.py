"""Micro-benchmark: where the time of one speculative step goes on this machine.

For each block size K it times (median of `reps` runs, after a warm-up):
  plain decode   one target forward of 1 token with a KV cache (what plain greedy pays per token)
  verify         one target forward of K tokens with the drafter's tapped hidden states
  drafter        one drafter pass over [anchor, MASK x (K-1)] with new context rows
  drafter head   the target LM head on the K-1 draft rows, 2-D input (our path)
  corrector      DCOCO: top-K candidates of those rows, transition scores and the prefix-first walk
                 (`corrector_share` = corrector / (drafter + drafter head + corrector))
  slow head      the same head, frozen, on a 3-D slice `h[:, 1:]` without hf_specdec's fix (torch CPU bf16 slow path)
  step           a whole step inside `generate(assistant_model=...)`, measured end to end
  bookkeeping    step - verify - drafter - drafter head
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

import hf_specdec
from hf_specdec.models.block_drafter import DraftContextCache
from hf_specdec.models.heads.dcoco.walk import prefix_first_walk

COLUMNS = [
    "block_size",
    "plain_decode_ms",
    "verify_ms",
    "drafter_ms",
    "drafter_head_ms",
    "slow_head_ms",
    "corrector_ms",
    "corrector_share",
    "step_ms",
    "bookkeeping_ms",
]


def median_ms(fn, reps: int) -> float:
    """Median wall time of `reps` calls of `fn`, in ms, after one untimed call."""
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def target_forward_ms(target, prompt, n_new: int, taps, reps: int) -> float:
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.no_grad():
        target(prompt, past_key_values=cache, use_cache=True)
    new = prompt[:, -n_new:]

    def step():
        with torch.no_grad():
            target(new, past_key_values=cache, use_cache=True, output_hidden_states=taps, logits_to_keep=n_new)
        cache.crop(-n_new)

    return median_ms(step, reps)


def _same_rows(cache: DraftContextCache) -> DraftContextCache:
    """A new cache holding the rows of `cache` (tensors shared): extending it leaves `cache` as it was."""
    copy = DraftContextCache()
    for layer, (keys, values) in enumerate(zip(cache.keys, cache.values, strict=True)):
        copy.extend(layer, keys, values)
    copy.positions = cache.positions  # the rows' positions (kept by drafters with sliding-window layers)
    return copy


def drafter_ms(drafter, noise, context, feats, reps: int) -> float:
    """One drafter pass adding `feats` (new context rows) to a cache that holds `context`, then drafting the block.

    Each call gets its own copy of the filled cache (made before the clock starts), so the context length stays
    the same from one repetition to the next."""
    device, n, block_size = noise.device, context.shape[1], noise.shape[1]
    filled = DraftContextCache()
    drafter(noise, context, torch.arange(n + block_size, device=device)[None], cache=filled)
    caches = [_same_rows(filled) for _ in range(reps + 1)]  # + the warm-up call of median_ms
    positions = torch.arange(n, n + feats.shape[1] + block_size, device=device)[None]
    return median_ms(lambda: drafter(noise, feats, positions, cache=caches.pop()), reps)


def corrector_ms(drafter, target, hidden, logits, reps: int, candidates: int) -> float:
    """Time of DCOCO's correction on one block: candidates, transitions and the walk."""
    dcoco = hf_specdec.attach_head(drafter, "dcoco", corrector_candidates=candidates).eval()
    embed = target.get_input_embeddings()
    anchor = torch.zeros(1, dtype=torch.long, device=hidden.device)

    def correct():
        scores = dcoco.corrector.scores(hidden[None], logits[None], anchor, embed, None)
        prefix_first_walk(scores.first, scores.nxt).tolist()  # the walk's result is read, as in a real step

    return median_ms(correct, reps)


def measure(target, block_size: int, prompt, reps: int, new_tokens: int, candidates: int = 16) -> dict:
    """One row of the table (see the module docstring) for a fresh drafter of `block_size`."""
    drafter = hf_specdec.BlockDrafter.for_target(target, block_size=block_size).eval()
    H, taps = target.config.hidden_size, drafter.config.target_layer_ids
    head = target.get_output_embeddings()
    frozen = head.weight.detach()  # a frozen target (requires_grad=False) is what triggers the slow path
    like = {"dtype": target.dtype, "device": target.device}
    feats = torch.randn(1, 2, len(taps) * H, **like)
    noise = torch.randn(1, block_size, H, **like)
    hidden = torch.randn(1, block_size, H, **like)
    with torch.no_grad():
        context = torch.randn(1, prompt.shape[1], len(taps) * H, **like)
        row = {
            "block_size": block_size,
            "plain_decode_ms": target_forward_ms(target, prompt, 1, None, reps),
            "verify_ms": target_forward_ms(target, prompt, block_size, [i + 1 for i in taps], reps),
            "drafter_ms": drafter_ms(drafter, noise, context, feats, reps),
            "drafter_head_ms": median_ms(lambda: head(hidden[0, 1:]), reps),
            "slow_head_ms": median_ms(lambda: torch.nn.functional.linear(hidden[:, 1:], frozen), max(2, reps // 3)),
            "corrector_ms": corrector_ms(drafter, target, hidden[0], head(hidden[0, 1:]), reps, candidates),
        }
        start = time.perf_counter()
        target.generate(prompt, max_new_tokens=1, do_sample=False, assistant_model=drafter)  # prefill only
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        target.generate(prompt, max_new_tokens=new_tokens, do_sample=False, assistant_model=drafter)
        elapsed = (time.perf_counter() - start - prefill) * 1e3
    row["step_ms"] = elapsed / drafter.last_acceptance_stats.verify_forwards
    row["bookkeeping_ms"] = row["step_ms"] - row["verify_ms"] - row["drafter_ms"] - row["drafter_head_ms"]
    draft = row["drafter_ms"] + row["drafter_head_ms"]
    row["corrector_share"] = row["corrector_ms"] / (draft + row["corrector_ms"])
    return row


def run(
    target: str,
    block_sizes: list[int],
    dtype: str = "bfloat16",
    context: int = 64,
    reps: int = 7,
    new_tokens: int = 24,
    candidates: int = 16,
    out: str | Path = "results/step_cost.json",
) -> list[dict]:
    """Measure every block size on the model at `target` (a folder or Hub id), print the table, write JSON."""
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(target, dtype=getattr(torch, dtype)).to(device).eval()
    hf_specdec.fix_lm_head_strides(model)
    prompt = torch.randint(100, 20000, (1, context), generator=torch.Generator().manual_seed(0)).to(device)
    rows = [measure(model, k, prompt, reps, new_tokens, candidates) for k in block_sizes]
    print(f"target {target} ({dtype}, {device}, {torch.get_num_threads()} threads, context {context})")
    print(" | ".join(COLUMNS))
    for row in rows:
        print(" | ".join(f"{row[c]:.3g}" if isinstance(row[c], float) else str(row[c]) for c in COLUMNS))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps({"target": target, "dtype": dtype, "device": device, "rows": rows}, indent=2))
    print(f"wrote {out}")
    return rows
