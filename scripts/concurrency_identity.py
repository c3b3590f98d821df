"""fp32 check on the real target: every request served with continuous batching equals plain batched greedy.

    python scripts/concurrency_identity.py --drafter drafters/qwen2.5-coder-1.5b-pard runs/dcoco/drafter --concurrency 4

Prints, per drafter, how many of the requests are token-identical (bf16 can differ at near-ties; fp32 must not).
The check is hf_specdec.bench.concurrency.check_identity; this script parses arguments.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from command_line import HelpFormatter


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument(
        "--target", default="qwen2.5-coder-1.5b", help="folder, Hub id or offline model name (built on first use)"
    )
    p.add_argument("--drafter", nargs="+", required=True, help="saved drafters (folders or Hub ids)")
    p.add_argument("--concurrency", type=int, default=4, help="requests served together")
    p.add_argument("--num-prompts", type=int, default=1, help="prompts per task")
    p.add_argument("--max-new-tokens", type=int, default=24, help="new tokens per request")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("results/concurrency/identity_fp32.json"),
        help="the JSON report (the default is in the repository's results/ folder)",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from hf_specdec.bench.concurrency import check_identity  # torch and transformers: after the arguments

    check_identity(args.target, args.drafter, args.concurrency, args.num_prompts, args.max_new_tokens, args.out)


if __name__ == "__main__":
    main()
