"""Micro-benchmark: where the time of one speculative step goes on this machine.

    python scripts/step_cost.py --target PATH [--block-sizes 4 8 16] [--dtype bfloat16] [--out results/step_cost.json]

For each block size K it times (median of --reps runs, after a warm-up):
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

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, DynamicCache

import hf_specdec
from hf_specdec.models.block_drafter.modeling_block_drafter import DraftContextCache


def median_ms(fn, reps: int) -> float:
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
    cache = DynamicCache()
    with torch.no_grad():
        target(prompt, past_key_values=cache, use_cache=True)
    new = prompt[:, -n_new:]

    def step():
        with torch.no_grad():
            target(new, past_key_values=cache, use_cache=True, output_hidden_states=taps, logits_to_keep=n_new)
        cache.crop(-n_new)

    return median_ms(step, reps)


def corrector_ms(drafter, target, hidden, logits, reps: int, candidates: int) -> float:
    """Time of DCOCO's correction on one block: candidates, transitions and the walk."""
    from hf_specdec.models.dcoco.walk import prefix_first_walk

    dcoco = hf_specdec.DCOCODrafter.from_block_drafter(drafter, corrector_candidates=candidates).eval()
    embed = target.get_input_embeddings()
    anchor = embed.weight[0]

    def correct():
        scores = dcoco.correction_scores(hidden, logits, anchor, embed)
        prefix_first_walk(scores.first, scores.nxt).tolist()  # the walk's result is read, as in a real step

    return median_ms(correct, reps)


def measure(target, block_size: int, prompt, reps: int, new_tokens: int, candidates: int = 16) -> dict:
    drafter = hf_specdec.BlockDrafter.for_target(target, block_size=block_size).eval()
    H, taps = target.config.hidden_size, drafter.config.target_layer_ids
    head = target.get_output_embeddings()
    frozen = head.weight.detach()  # a frozen target (requires_grad=False) is what triggers the slow path
    feats = torch.randn(1, 2, len(taps) * H, dtype=target.dtype, device=target.device)
    noise = torch.randn(1, block_size, H, dtype=target.dtype, device=target.device)
    hidden = torch.randn(1, block_size, H, dtype=target.dtype, device=target.device)
    cache = DraftContextCache()
    with torch.no_grad():
        context = torch.randn(1, prompt.shape[1], len(taps) * H, dtype=target.dtype, device=target.device)
        drafter(noise, context, torch.arange(prompt.shape[1] + block_size, device=target.device)[None], cache=cache)

    def drafter_pass():
        with torch.no_grad():
            n = cache.get_seq_length()
            drafter(noise, feats, torch.arange(n, n + 2 + block_size, device=target.device)[None], cache=cache)
            for layer in range(len(cache.keys)):  # keep the context length fixed between repetitions
                cache.keys[layer], cache.values[layer] = cache.keys[layer][:, :, :n], cache.values[layer][:, :, :n]

    with torch.no_grad():
        row = {
            "block_size": block_size,
            "plain_decode_ms": target_forward_ms(target, prompt, 1, None, reps),
            "verify_ms": target_forward_ms(target, prompt, block_size, [i + 1 for i in taps], reps),
            "drafter_ms": median_ms(drafter_pass, reps),
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--block-sizes", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--context", type=int, default=64, help="prompt tokens before the timed step")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--new-tokens", type=int, default=24, help="tokens of the end-to-end generate() run")
    parser.add_argument("--corrector-candidates", type=int, default=16, help="DCOCO's K for the corrector column")
    parser.add_argument("--out", default="results/step_cost.json")
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=getattr(torch, args.dtype)).to(device).eval()
    hf_specdec.fix_lm_head_strides(target)
    prompt = torch.randint(100, 20000, (1, args.context), generator=torch.Generator().manual_seed(0)).to(device)
    rows = [measure(target, k, prompt, args.reps, args.new_tokens, args.corrector_candidates) for k in args.block_sizes]
    cols = [
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
    print(f"target {args.target} ({args.dtype}, {device}, {torch.get_num_threads()} threads, context {args.context})")
    print(" | ".join(cols))
    for row in rows:
        print(" | ".join(f"{row[c]:.3g}" if isinstance(row[c], float) else str(row[c]) for c in cols))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps({"target": args.target, "dtype": args.dtype, "device": device, "rows": rows}, indent=2)
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
