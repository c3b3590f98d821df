"""fp32 check on the real target: every request served with continuous batching equals plain batched greedy.

    python scripts/concurrency_identity.py --drafter drafters/qwen2.5-coder-1.5b runs/dcoco/drafter --concurrency 4

Prints, per drafter, how many of the requests are token-identical (bf16 can differ at near-ties; fp32 must not).
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch
from benchmark import load_cases, load_causal_lm, resolve_model
from concurrency import plain_batches, served
from transformers import AutoTokenizer

import hf_specdec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="qwen2.5-coder-1.5b")
    p.add_argument("--drafter", nargs="+", required=True)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--num-prompts", type=int, default=1, help="per task")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--out", type=Path, default=Path("results/concurrency/identity_fp32.json"))
    args = p.parse_args()
    path = resolve_model(args.target)
    target = load_causal_lm(path, torch.float32, torch.device("cpu"))
    cases = load_cases(
        AutoTokenizer.from_pretrained(path), ["humaneval", "gsm8k", "mtbench", "creative"], args.num_prompts, 0
    )
    by_task: dict[str, list] = {}
    for case in cases:
        by_task.setdefault(case.task, []).append(case.input_ids[0])
    prompts = [x for group in itertools.zip_longest(*by_task.values()) for x in group if x is not None]
    pad = target.generation_config.pad_token_id or 0
    plain, _, _ = plain_batches(target, prompts, args.concurrency, args.max_new_tokens, pad)
    result = {"concurrency": args.concurrency, "requests": len(prompts), "max_new_tokens": args.max_new_tokens}
    for spec in args.drafter:
        drafter = hf_specdec.load_drafter(spec, dtype=torch.float32).eval()
        out, _, _, tau = served(target, drafter, prompts, args.concurrency, args.max_new_tokens, pad)
        same = sum(a == b for a, b in zip(out, plain, strict=True))
        result[spec] = {"identical": same, "tau": tau}
        print(f"{spec}: {same}/{len(prompts)} identical in fp32, tau {tau:.2f}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
