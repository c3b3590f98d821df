"""Draft cost and per-depth acceptance of a PARD drafter on this machine (zero-shot or trained).

    # zero-shot: the offline 0.5B as a PARD drafter for the offline 1.5B target, blocks 4, 8 and 12
    python scripts/pard_cost.py --target qwen2.5-coder-1.5b --base-lm qwen2.5-coder-0.5b --label zero-shot
    # a trained one
    python scripts/pard_cost.py --target qwen2.5-coder-1.5b --drafter drafters/qwen2.5-coder-1.5b-pard --label trained

Writes OUT_DIR/pard_LABEL.json (machine, cost table, acceptance per depth); the measurements are
hf_specdec/bench/pard_cost.py, this script parses arguments.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from command_line import HelpFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--target", default="qwen2.5-coder-1.5b", help="folder, Hub id or offline model name")
    parser.add_argument("--drafter", help="a saved PARD drafter (folder); else --base-lm with an untrained mask")
    parser.add_argument("--base-lm", default="qwen2.5-coder-0.5b", help="causal LM for a zero-shot drafter")
    parser.add_argument("--mask-token-id", type=int, default=151665, help="mask token of a zero-shot drafter")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="model dtype")
    parser.add_argument("--blocks", type=int, nargs="+", default=[4, 8, 12], help="block sizes measured")
    parser.add_argument("--tasks", nargs="+", default=["humaneval", "gsm8k"], help="prompt sets")
    parser.add_argument("--num-prompts", type=int, default=3, help="prompts per task (seed 1: not the benchmark's)")
    parser.add_argument("--new-tokens", type=int, default=64, help="new tokens per prompt")
    parser.add_argument("--label", default="zero-shot", help="names the report: OUT_DIR/pard_LABEL.json")
    parser.add_argument("--out-dir", default="results/pard", help="where the report goes")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    import torch
    from transformers import AutoTokenizer

    from hf_specdec import PardDrafter, load_drafter
    from hf_specdec.bench.cases import load_cases
    from hf_specdec.bench.model_specs import load_causal_lm, resolve_model
    from hf_specdec.bench.pard_cost import run_pard_cost

    dtype = getattr(torch, args.dtype)
    target_path = resolve_model(args.target)
    target = load_causal_lm(target_path, dtype, torch.device("cpu"))
    if args.drafter:
        drafter = load_drafter(args.drafter, dtype=dtype).eval()
    else:
        lm = load_causal_lm(resolve_model(args.base_lm), dtype, torch.device("cpu"))
        drafter = PardDrafter.from_causal_lm(lm, target, mask_token_id=args.mask_token_id, base_model=args.base_lm)
    tokenizer = AutoTokenizer.from_pretrained(target_path)
    prompts = [case.input_ids for case in load_cases(tokenizer, args.tasks, args.num_prompts, seed=1)]
    report = run_pard_cost(
        target, drafter.eval(), prompts, Path(args.out_dir), args.new_tokens, args.blocks, args.label
    )
    print(json.dumps({k: report[k] for k in ("cost", "acceptance")}, indent=1))


if __name__ == "__main__":
    main()
