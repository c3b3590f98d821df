"""The benchmark report on disk and on screen: benchmark.json, benchmark.md, benchmark.png, and a text table."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .cost_curve import cost_curve_line
from .methods import PLAIN
from .plots import write_benchmark_plot
from .summary import ALL_TASKS

BAND = "{:.2f}-{:.2f}"  # a [lo, hi] +-2 SE band
COLUMNS = [
    ("e2e tok/s", "e2e_tok_s", "{:.2f}"),
    ("e2e x", "speedup_e2e", "{:.2f}"),
    ("e2e x ±2SE", "speedup_e2e_2se", BAND),
    ("e2e x(sum)", "speedup_e2e_sum", "{:.2f}"),
    ("e2e x(sum) ±2SE", "speedup_e2e_sum_2se", BAND),
    ("e2e x(geo)", "speedup_e2e_geo", "{:.2f}"),
    ("e2e x(geo) ±2SE", "speedup_e2e_geo_2se", BAND),
    ("dec tok/s", "decode_tok_s", "{:.2f}"),
    ("dec x", "speedup_decode", "{:.2f}"),
    ("dec x(sum)", "speedup_decode_sum", "{:.2f}"),
    ("dec x(geo)", "speedup_decode_geo", "{:.2f}"),
    ("tau", "tau", "{:.2f}"),
    ("agree", "agreement_rate", "{:.2f}"),
    ("ident", "identical_rate", "{:.2f}"),
    ("mem MiB", "peak_mem_mib", "{:.0f}"),
]


def _finite(value) -> bool:
    return value is not None and not (isinstance(value, float) and not math.isfinite(value))


def _cell(value, fmt: str) -> str:
    if isinstance(value, (list, tuple)):  # a band
        return fmt.format(*value) if value and all(_finite(v) for v in value) else "-"
    return fmt.format(value) if _finite(value) else "-"


def lookup_tag(method: dict) -> str | None:
    """How a method stands to prompt lookup: HF prompt lookup alone, or an hf_specdec drafter with / without its
    prompt-lookup branch (`decoding.prompt_lookup_tokens` of its settings); None for the other methods."""
    if method["kind"] == "prompt_lookup":
        return "(HF lookup only)"
    if method["kind"] == "hf_specdec":
        tokens = method["settings"].get("decoding", {}).get("prompt_lookup_tokens", 0)
        return "(with lookup)" if tokens else "(no lookup)"
    return None


def lookup_split_lines(report: dict) -> list[str]:
    """Per task, x(geo) and x(sum) (end to end, vs plain) of HF prompt lookup and of each hf_specdec drafter, with
    the drafters' lookup branch on or off named in the header; [] unless the run has at least two of: HF prompt
    lookup, a drafter with lookup, a drafter without."""
    tagged = [(m["label"], tag) for m in report["methods"] if (tag := lookup_tag(m)) is not None]
    if len({tag for _, tag in tagged}) < 2:
        return []
    header = ["task"]
    for label, tag in tagged:
        header += [f"{label} {tag} x(geo)", f"{label} {tag} x(sum)"]
    rows = []
    for task, by_method in report["results"].items():
        cells = [task]
        for label, _ in tagged:
            s = by_method[label]
            cells += [_cell(s.get("speedup_e2e_geo"), "{:.2f}"), _cell(s.get("speedup_e2e_sum"), "{:.2f}")]
        rows.append("| " + " | ".join(cells) + " |")
    return [
        "## Drafter vs prompt lookup (end-to-end speedup over plain generate: x(geo) and x(sum))",
        "",
        "(with lookup) / (no lookup): the drafter's `decoding.prompt_lookup_tokens` is > 0 / 0; (HF lookup only): "
        "transformers' prompt lookup decoding, no drafter.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *rows,
        "",
    ]


def table_rows(report: dict) -> list[list[str]]:
    rows = []
    for task, by_method in report["results"].items():
        for label, s in by_method.items():
            rows.append([task, label, *(_cell(s.get(key), fmt) for _, key, fmt in COLUMNS)])
    return rows


def format_text_table(report: dict) -> str:
    header = ["task", "method", *(name for name, _, _ in COLUMNS)]
    rows = [header, *table_rows(report)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def format_markdown(report: dict) -> str:
    meta, settings = report["meta"], report["settings"]
    header = ["task", "method", *(name for name, _, _ in COLUMNS)]
    lines = [
        "# hf_specdec benchmark",
        "",
        f"- date: {meta['date']}",
        f"- machine: {meta['machine']}",
        cost_curve_line(meta.get("cost_curve")),
        f"- versions: {meta['versions']}",
        f"- command: `{meta.get('command', '(library call)')}`",
        f"- settings: {settings}",
        f"- prompts: {len(report['prompts'])} ({', '.join(report['tasks'])}); "
        f"target weights {report['target_weights_mib']:.0f} MiB",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in table_rows(report)),
        "",
        *lookup_split_lines(report),
        "## Methods",
        "",
        *(
            f"- `{m['label']}` ({m['kind']}): {m['settings']}, extra weights {m['extra_weights_mib']:.0f} MiB"
            for m in report["methods"]
        ),
        "",
        "## Acceptance histograms (all tasks; histogram[a] = verify forwards that accepted a drafts)",
        "",
        *histogram_lines(report),
        "",
        "## Definitions",
        "",
        *(f"- `{k}`: {v}" for k, v in report["definitions"].items()),
        "",
    ]
    return "\n".join(lines)


def histogram_lines(report: dict) -> list[str]:
    lines = []
    for label, s in report["results"][ALL_TASKS].items():
        if label == PLAIN:
            continue
        hist = s["library"]["histogram"] if "library" in s else s["histogram_hook"]
        source = "library stats" if "library" in s else "forward hook"
        lines.append(f"- `{label}` ({source}): {hist}")
        ways = s.get("library", {}).get("sampled_blocks")
        if ways:
            lines.append(f"  - sampled blocks by way of drafting (base-LM chain, m adapter drafts, plain step): {ways}")
    return lines


def _json_safe(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def write_outputs(report: dict, out_dir: Path) -> dict[str, Path]:
    """benchmark.json, benchmark.md and (with matplotlib, the bench extra) benchmark.png in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "benchmark.json", "md": out_dir / "benchmark.md", "png": out_dir / "benchmark.png"}
    paths["json"].write_text(json.dumps(_json_safe(report), indent=1) + "\n", encoding="utf-8")
    paths["md"].write_text(format_markdown(report), encoding="utf-8")
    if not write_benchmark_plot(report, paths["png"]):
        del paths["png"]
    return paths
