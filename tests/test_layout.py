"""The layout the README's Architecture section describes: its list of layers is the package's subpackages in the
order of import-linter's layers contract (pyproject.toml), layers only point down and no module imports itself back
through others (import-linter's contracts check the layers in CI too; cycles only here)."""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import hf_specdec
from hf_specdec.bench.import_graph import import_graph_report

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_no_import_points_up_a_layer_and_no_module_is_in_a_cycle():
    report = import_graph_report()
    assert report["modules"] > 50 and report["edges"] > 100  # the graph was really built
    assert report["backward_edges"] == []
    assert report["cycles"] == []


def test_the_docs_list_the_layers_the_package_has_in_the_contract_order():
    architecture = (ROOT / "docs" / "internals.md").read_text().split("\n## Architecture\n", 1)[1]
    tree = re.search(r"^```\nhf_specdec/.*?\n(.*?)^```", architecture, re.S | re.M).group(1)
    listed = re.findall(r"^  (\w+)/ ", tree, re.M)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = pyproject["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers" and "containers" not in c)  # the package's
    assert listed == [layer.removeprefix("hf_specdec.") for layer in layers]  # top first, as the contract
    assert set(listed) == {m.name for m in pkgutil.iter_modules(hf_specdec.__path__) if m.ispkg}
