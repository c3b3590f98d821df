"""Micro-benchmark: where the time of one speculative step goes on this machine.

    python scripts/step_cost.py --target PATH [--block-sizes 4 8 16] [--dtype bfloat16] [--out results/step_cost.json]

What each column times is listed in hf_specdec/bench/step_cost.py's docstring (and in --help).
The measurements are hf_specdec.bench.step_cost; this script parses arguments.
"""

from __future__ import annotations

import argparse

from hf_specdec.bench import step_cost
from hf_specdec.bench.step_cost import run


def main() -> None:
    description = __doc__ + "\n" + step_cost.__doc__
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--block-sizes", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--context", type=int, default=64, help="prompt tokens before the timed step")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--new-tokens", type=int, default=24, help="tokens of the end-to-end generate() run")
    parser.add_argument("--corrector-candidates", type=int, default=16, help="DCOCO's K for the corrector column")
    parser.add_argument("--out", default="results/step_cost.json")
    args = parser.parse_args()
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
