"""Put a benchmark's markdown report (scripts/benchmark.py's benchmark.md) into README.md between the markers
`<!-- results:start -->` and `<!-- results:end -->`, unchanged, so the README's figures are the script's.

    python scripts/readme_results.py results/shipped/benchmark.md
"""

from __future__ import annotations

import argparse
from pathlib import Path

START, END = "<!-- results:start -->", "<!-- results:end -->"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", help="benchmark.md written by scripts/benchmark.py")
    parser.add_argument("--readme", default="README.md")
    args = parser.parse_args()
    report = Path(args.report).read_text(encoding="utf-8").strip()
    report = report.replace("\n# ", "\n#### ").replace("\n## ", "\n#### ")
    if report.startswith("# "):
        report = "####" + report[1:]
    readme = Path(args.readme).read_text(encoding="utf-8")
    if START not in readme or END not in readme:
        raise SystemExit(f"{args.readme} has no {START} ... {END} section")
    head, rest = readme.split(START, 1)
    tail = rest.split(END, 1)[1]
    Path(args.readme).write_text(f"{head}{START}\n{report}\n{END}{tail}", encoding="utf-8")
    print(f"updated {args.readme} from {args.report}")


if __name__ == "__main__":
    main()
