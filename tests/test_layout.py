"""The layout the README's Architecture section describes: layers only point down and no module imports itself
back through others (import-linter's contracts in pyproject.toml check the layers in CI too; cycles only here)."""

from __future__ import annotations

from hf_specdec.bench.import_graph import import_graph_report


def test_no_import_points_up_a_layer_and_no_module_is_in_a_cycle():
    report = import_graph_report()
    assert report["modules"] > 50 and report["edges"] > 100  # the graph was really built
    assert report["backward_edges"] == []
    assert report["cycles"] == []
