"""Per-step time of hf_specdec's own decoding loop (tree, tree + lookup, batch of 2), through generate() only.

    python scripts/step_time.py tiny                                   # random tiny Llama + fresh drafter
    python scripts/step_time.py real --target ~/.cache/hf_specdec/models/qwen2.5-coder-1.5b \\
        --drafter drafters/qwen2.5-coder-1.5b-pard
    python scripts/step_time.py tiny --library /path/to/other/checkout # the same timing of another version

The measurements are hf_specdec/bench/step_time.py (public API only); this script parses arguments, loads that
file (after putting --library first on the path, if given) and prints JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from command_line import HelpFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("which", choices=["tiny", "real"], help="random tiny models, or --target and --drafter")
    parser.add_argument("--target", help="target folder (real)")
    parser.add_argument("--drafter", help="drafter folder (real)")
    parser.add_argument("--reps", type=int, default=5, help="timed generate() calls per case (the best is kept)")
    parser.add_argument("--library", help="a checkout of hf_specdec to time instead of the installed one")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.which == "real" and not (args.target and args.drafter):
        parser.error("real needs --target and --drafter")
    if args.library:
        sys.path.insert(0, str(Path(args.library).resolve()))
    path = Path(__file__).resolve().parents[1] / "hf_specdec" / "bench" / "step_time.py"
    spec = importlib.util.spec_from_file_location("hf_specdec_step_time", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print(json.dumps(module.run(args.which, args.reps, args.target, args.drafter), indent=1))


if __name__ == "__main__":
    main()
