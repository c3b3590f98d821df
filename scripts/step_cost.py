"""Micro-benchmark: where the time of one speculative step goes on this machine.

    python scripts/step_cost.py --target ~/.cache/hf_specdec/models/qwen2.5-coder-1.5b --out runs/step_cost.json

What each column times is listed in hf_specdec/bench/step_cost.py's docstring (and below, in --help).
The measurements are hf_specdec.bench.step_cost; this script parses arguments.
"""

from __future__ import annotations

import argparse

from command_line import HelpFormatter, library_docstring


def build_parser() -> argparse.ArgumentParser:
    description = __doc__ + "\n" + library_docstring("hf_specdec.bench.step_cost")
    parser = argparse.ArgumentParser(description=description, formatter_class=HelpFormatter)
    parser.add_argument("--target", required=True, help="target model folder or Hub id")
    parser.add_argument("--block-sizes", type=int, nargs="+", default=[4, 8, 16], help="drafter block sizes timed")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="model dtype")
    parser.add_argument("--context", type=int, default=64, help="prompt tokens before the timed step")
    parser.add_argument("--reps", type=int, default=7, help="timed repetitions (the median is reported)")
    parser.add_argument("--new-tokens", type=int, default=24, help="tokens of the end-to-end generate() run")
    parser.add_argument("--corrector-candidates", type=int, default=16, help="DCOCO's K for the corrector column")
    parser.add_argument("--out", default="results/step_cost.json", help="the JSON report")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from hf_specdec.bench.step_cost import run  # torch and transformers: after the arguments

    run(
        args.target,
        args.block_sizes,
        dtype=args.dtype,
        context=args.context,
        reps=args.reps,
        new_tokens=args.new_tokens,
        candidates=args.corrector_candidates,
        out=args.out,
    )


if __name__ == "__main__":
    main()
