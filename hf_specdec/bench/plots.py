"""Figures of the benchmark (acceptance histograms, speedup per task) and of the concurrency runs.

matplotlib is optional (the `bench` extra): without it each figure is skipped with a note, the rest of the report
is written as usual.
"""

from __future__ import annotations

import math
from pathlib import Path

from .methods import PLAIN
from .summary import ALL_TASKS


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None (after a note naming the extra) when it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed; skipping the plot (pip install 'hf_specdec[bench]')")
        return None
    return plt


def write_benchmark_plot(report: dict, path: Path) -> bool:
    """Acceptance histograms and end-to-end speedups side by side; False when matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return False
    fig, (ax_hist, ax_speed) = plt.subplots(1, 2, figsize=(12, 4.5))
    plot_histograms(ax_hist, report)
    plot_speedups(ax_speed, report)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_histograms(ax, report: dict) -> None:
    drafters = {k: v["library"] for k, v in report["results"][ALL_TASKS].items() if "library" in v}
    width = 0.8 / max(len(drafters), 1)
    for i, (label, lib) in enumerate(drafters.items()):
        total = max(sum(lib["histogram"]), 1)
        xs = [a + i * width for a in range(len(lib["histogram"]))]
        ax.bar(xs, [c / total for c in lib["histogram"]], width, label=f"{label} (tau {lib['tau']:.2f})")
    ax.set(
        title="hf_specdec acceptance (all tasks)",
        xlabel="accepted drafts per verify forward",
        ylabel="share of forwards",
    )
    if drafters:
        ax.legend()


def _geo_and_error(summary: dict) -> tuple[float, float, float]:
    """x(geo) and its distances down and up to the +-2 SE band (0 where the band is unknown)."""
    y = summary["speedup_e2e_geo"]
    lo, hi = summary.get("speedup_e2e_geo_2se") or (None, None)
    known = all(isinstance(v, float) and math.isfinite(v) for v in (y, lo, hi))
    return y, (y - lo if known else 0.0), (hi - y if known else 0.0)


def plot_speedups(ax, report: dict) -> None:
    tasks = list(report["results"])
    labels = [m["label"] for m in report["methods"] if m["label"] != PLAIN]
    width = 0.8 / max(len(labels), 1)
    for i, label in enumerate(labels):
        ys, down, up = zip(*(_geo_and_error(report["results"][t][label]) for t in tasks), strict=True)
        xs = [j + i * width for j in range(len(tasks))]
        ax.bar(xs, ys, width, yerr=[down, up], capsize=2, label=label)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(tasks))], tasks)
    ax.set(title="e2e speedup vs plain generate (geo-mean, ±2 SE)", ylabel="x")
    ax.legend(fontsize="small")


def write_concurrency_plot(report: dict, path: Path) -> bool:
    """Throughput and speedup against concurrency, one line per method; False when matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for method in dict.fromkeys(r["method"] for r in report["rows"]):
        mine = [r for r in report["rows"] if r["method"] == method]
        left.plot([r["concurrency"] for r in mine], [r["tokens_per_s"] for r in mine], marker="o", label=method)
        right.plot([r["concurrency"] for r in mine], [r["throughput_ratio"] for r in mine], marker="o", label=method)
    left.set(xlabel="concurrent requests", ylabel="generated tokens / s", xscale="log", title="throughput")
    right.set(xlabel="concurrent requests", ylabel="x plain batched generate", xscale="log", title="speedup")
    right.axhline(1.0, color="grey", lw=0.8)
    left.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
