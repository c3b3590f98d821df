"""What the scripts share on their command line: a help formatter, and light loading of the library's parts that
their parsers need, so that ``--help`` and argument errors come at once.

Importing hf_specdec loads torch and transformers and registers every drafter kind (seconds). A script needs that
only after its arguments are parsed, so it imports the library inside ``main()``; what its parser needs (a training
config class, the benchmark's task names) lives in modules that import only the standard library, and
`library_module` loads such a module without running ``hf_specdec/__init__.py``. The module is registered under
its own name: the package import that follows finds it there, so both share one module (the same classes, which
the library looks up by type).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Each option's default after its help (unless the help already states it, or it is None or a flag's False),
    and the description's examples kept line for line."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if "default" in (action.help or "") or action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def library_file(name: str) -> Path:
    """The source file of ``hf_specdec.<...>`` module `name`; the package is located, not imported."""
    package = importlib.util.find_spec("hf_specdec")
    if package is None or not package.submodule_search_locations:
        raise SystemExit("hf_specdec is not installed; run `pip install -e .` in the repository first")
    return Path(package.submodule_search_locations[0]).joinpath(*name.split(".")[1:]).with_suffix(".py")


def library_module(name: str) -> ModuleType:
    """``hf_specdec.<...>`` module `name` (one that imports only the standard library), loaded from its file alone."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, library_file(name))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: a dataclass looks its module up while it is built
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def library_docstring(name: str) -> str:
    """The docstring of ``hf_specdec.<...>`` module `name`, read without importing it (for a script's --help)."""
    return ast.get_docstring(ast.parse(library_file(name).read_text())) or ""
