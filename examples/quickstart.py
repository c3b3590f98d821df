"""Speculative decoding with a drafter (any kind) in three lines, timed against plain `generate`.

    python examples/quickstart.py --target path/to/target [--drafter path/to/drafter] [--sample]

Without `--drafter` a fresh, untrained drafter is built for the target: output is still exactly the target's,
but it accepts almost nothing (tau ~ 1). A trained drafter is what makes it fast.
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specdec

PROMPT = "Write a Python function that returns the n-th Fibonacci number, with a docstring and a short test."


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True, help="target model folder or Hub id")
    parser.add_argument("--drafter", default=None, help="drafter folder or Hub id (default: a fresh, untrained one)")
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=8, help="only for a fresh drafter")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--sample", action="store_true", help="sample (temperature 0.7, top_p 0.9) instead of greedy")
    args = parser.parse_args()

    dtype = getattr(torch, args.dtype)
    tokenizer = AutoTokenizer.from_pretrained(args.target)
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=dtype).eval()
    if args.drafter:
        drafter = hf_specdec.load_drafter(args.drafter, dtype=dtype).eval()  # any drafter kind, by its config
    else:
        print("no --drafter given: using a fresh, untrained drafter (exact output, tau ~ 1)")
        drafter = hf_specdec.BlockDrafter.for_target(target, block_size=args.block_size).eval()
    hf_specdec.fix_lm_head_strides(target)  # the same fast LM-head path for both runs

    messages = [{"role": "user", "content": args.prompt}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    gen = dict(max_new_tokens=args.max_new_tokens, do_sample=False)
    if args.sample:
        gen.update(do_sample=True, temperature=0.7, top_p=0.9, top_k=0)
    target.generate(**inputs, max_new_tokens=2, do_sample=False)  # warm-up
    # the drafter's warm-up too: its one-time costs (a sampled chain's first call times its weights, about a second)
    target.generate(**inputs, assistant_model=drafter, **{**gen, "max_new_tokens": 4})

    torch.manual_seed(0)
    plain, t_plain = timed(lambda: target.generate(**inputs, **gen))
    torch.manual_seed(0)
    spec, t_spec = timed(lambda: target.generate(**inputs, assistant_model=drafter, **gen))

    n_plain = plain.shape[1] - inputs["input_ids"].shape[1]
    n_spec = spec.shape[1] - inputs["input_ids"].shape[1]
    stats = drafter.last_acceptance_stats
    same = torch.equal(plain, spec)
    print(tokenizer.decode(spec[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))
    print("-" * 72)
    mode = "sampling, T=0.7, top_p 0.9" if args.sample else "greedy"
    print(f"plain generate      : {n_plain / t_plain:6.2f} tokens/s ({n_plain} tokens, {t_plain:.1f} s; {mode})")
    print(f"{'with ' + type(drafter).__name__:<20}: {n_spec / t_spec:6.2f} tokens/s ({n_spec} tokens, {t_spec:.1f} s)")
    print(f"speedup             : {t_plain / t_spec * n_spec / max(n_plain, 1):.2f}x")
    print(f"tau (tokens/forward): {stats.tau:.2f}   accepted-length histogram: {stats.histogram}")
    if stats.plain_steps:  # steps without drafts: tries and probes of plain steps, or where drafting did not pay
        print(
            f"plain steps         : {stats.plain_steps} of {stats.row_steps} (the adaptive budget measuring plain "
            f"steps, or drafting not paying then); tau over drafted steps {stats.drafted_tau:.2f}"
        )
    curve = hf_specdec.cost_model(target).curve()  # {fed tokens: seconds} the adaptive budget measured here
    rises = ", ".join(f"{n}: {s / curve[1]:.2f}x" for n, s in curve.items() if 1 in curve and n in (2, 4, 8, 16, 32))
    if rises:  # drafting pays where feeding more tokens costs little more than one
        print(f"verify cost         : {1000 * curve[1]:.0f} ms for 1 token; {rises} (this machine, as measured)")
    print(f"drafter settings    : {type(drafter).__name__}, block {drafter.config.block_size}, {drafter.decoding}")
    if args.sample:  # a sampled output is one draw from the target's distribution, plain's another
        print("output              : sampled from the target's distribution (tests/test_sampling_distribution.py)")
    else:
        print(f"output identical    : {same}" + ("" if same or dtype == torch.float32 else " (bf16 verify numerics)"))


if __name__ == "__main__":
    main()
