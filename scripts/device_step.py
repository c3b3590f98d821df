"""Synthetic step benchmark on one device: random-weight Qwen2.5-1.5B and Qwen3-8B shapes, forced-acceptance
drafters (block drafters; PARD and PARD-2 over random Qwen2.5-0.5B / Qwen3-0.6B LMs), plain vs speculative steps
(chain, trees, SDPA vs flex masks, batches), bf16, and a bf16 greedy agreement check against plain decoding.
Nothing is downloaded. Exit status 1 when a case failed or an agreement check's output differed from plain's.

    python scripts/device_step.py --device cuda --out results/device_step.json
    python scripts/device_step.py --device cpu --small --out runs/device_step_small.json

The first is the full grid (a GPU; scripts/device_check.sh runs it after the CUDA tests); the second the tiny
shape and a few cases. What is timed is hf_specdec/bench/device_step.py's docstring (below, in --help); this
script parses arguments.
"""

from __future__ import annotations

import argparse
import sys

from command_line import HelpFormatter, library_docstring


def build_parser() -> argparse.ArgumentParser:
    description = __doc__ + "\n" + library_docstring("hf_specdec.bench.device_step")
    parser = argparse.ArgumentParser(description=description, formatter_class=HelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda or cpu")
    parser.add_argument("--small", action="store_true", help="the tiny shapes and a few cases (seconds on a CPU)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"], help="model dtype")
    parser.add_argument("--steps", type=int, default=0, help="timed steps per case (0: 12, or 3 with --small)")
    parser.add_argument("--budget-s", type=float, default=300.0, help="no new case starts after this many seconds")
    parser.add_argument("--out", default="results/device_step.json", help="the JSON report")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from hf_specdec.bench.device_step import run  # torch and transformers: after the arguments

    result = run(args.device, args.small, args.out, args.budget_s, dtype=args.dtype, steps=args.steps)
    sys.exit(1 if result["failed"] or result["disagreed"] else 0)


if __name__ == "__main__":
    main()
