"""hf_specdec's import graph: edges that point up a layer, and import cycles between modules.

Built with grimp (the graph import-linter checks in CI) over every import statement, including those inside
functions and under `TYPE_CHECKING`. A module's layer is its top-level subpackage, ranked bottom-up as in
`pyproject.toml`'s contract; the earlier subpackage names are ranked by the role they had (maths: `sampling`;
drafter kinds: `drafting`, `correction`), so two versions of the library compare on one scale.
"""

from __future__ import annotations

RANK = {
    "verification": 0,
    "sampling": 0,
    "models": 1,
    "drafting": 1,
    "correction": 1,
    "decoding": 2,
    "hub": 3,
    "training": 4,
    "bench": 5,
}


def import_graph_report(package: str = "hf_specdec") -> dict:
    """{"modules", "edges", "backward_edges": ["a -> b", ...], "cycles": ["a -> b -> a", ...]} of `package` as
    found first on sys.path."""
    import grimp
    import networkx as nx

    graph = grimp.build_graph(package, cache_dir=None)
    edges = [(m, d) for m in graph.modules for d in graph.find_modules_directly_imported_by(m)]
    backward = [f"{m} -> {d}" for m, d in edges if -1 < _rank(m) < _rank(d)]
    packages = {m.rsplit(".", 1)[0] for m in graph.modules if "." in m}
    modules = nx.DiGraph([(m, d) for m, d in edges if m not in packages and d not in packages])
    cycles = [" -> ".join([*c, c[0]]) for c in nx.simple_cycles(modules)]
    return {"modules": len(graph.modules), "edges": len(edges), "backward_edges": sorted(backward), "cycles": cycles}


def _rank(module: str) -> int:
    """The module's layer; -1 for the package root and anything unranked (never a backward edge)."""
    parts = module.split(".")
    return RANK.get(parts[1], -1) if len(parts) > 1 else -1


__all__ = ["import_graph_report"]
