"""Put a benchmark's markdown report (scripts/benchmark.py's benchmark.md) into README.md between the markers
`<!-- results:start -->` and `<!-- results:end -->`, unchanged, so the README's figures are the script's.

    python scripts/readme_results.py results/single-stream/2026-12-02-1152/benchmark.md --readme docs/benchmarks.md

The copying is hf_specdec.bench.readme_results; this script parses arguments.
"""

from __future__ import annotations

import argparse

from command_line import HelpFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("report", help="benchmark.md written by scripts/benchmark.py")
    parser.add_argument("--readme", default="README.md", help="the README to update")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from hf_specdec.bench.readme_results import insert_report  # the package import: after the arguments

    try:
        insert_report(args.report, args.readme)
    except ValueError as exc:  # no markers in the README
        raise SystemExit(str(exc)) from None


if __name__ == "__main__":
    main()
