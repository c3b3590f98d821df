"""hf_specdec's import graph: edges pointing up a layer and import cycles (needs the dev extra: grimp, networkx).

python scripts/import_graph.py                              # this checkout
python scripts/import_graph.py --library /path/to/checkout  # another version, on the same scale
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", help="a checkout of hf_specdec to analyse instead of the installed one")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.library:
        sys.path.insert(0, str(Path(args.library).resolve()))
    path = Path(__file__).resolve().parents[1] / "hf_specdec" / "bench" / "import_graph.py"
    spec = importlib.util.spec_from_file_location("hf_specdec_import_graph", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print(json.dumps(module.import_graph_report(), indent=1))


if __name__ == "__main__":
    main()
