"""From call records to the report dict: per task (and over all tasks) and per method rates, speedups, tau,
acceptance histograms, memory, agreement and identity. Definitions of every metric are in `definitions()`."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict
from datetime import datetime, timezone

from .environment import environment
from .methods import PLAIN

ALL_TASKS = "all"


def _mean(values: Iterable[float]) -> float:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.fmean(values) if values else math.nan


def _ratio(num: float, den: float) -> float:
    return num / den if den and math.isfinite(num) and math.isfinite(den) else math.nan


def call_rates(record: dict) -> tuple[float, float]:
    """(end-to-end tok/s, decode-only tok/s) of one call; decode is NaN when TTFT >= total (noise)."""
    decode_s = record["seconds"] - record["ttft_seconds"]
    decode = (record["new_tokens"] - 1) / decode_s if decode_s > 0 else math.nan
    return record["new_tokens"] / record["seconds"], decode


def hook_histogram(commit_lists: list[list[int]]) -> list[int]:
    """histogram[a] = forwards after the first that accepted a drafts (committed a + 1 tokens)."""
    accepted = [c - 1 for commits in commit_lists for c in commits[1:]]
    counts = [0] * (max(accepted, default=0) + 1)
    for a in accepted:
        counts[a] += 1
    return counts


def library_summary(records: list[dict]) -> dict:
    """Summed hf_specdec acceptance stats over calls: tau, histogram, acceptance rate."""
    stats = [r["library_stats"] for r in records]
    width = max(len(s["histogram"]) for s in stats)  # lookup branches can accept past the block
    hist = [sum(s["histogram"][a] for s in stats if a < len(s["histogram"])) for a in range(width)]
    forwards = sum(s.get("row_steps", s["verify_forwards"]) for s in stats)  # per row: tau is per row
    return {
        "tau": _ratio(sum(s["committed_tokens"] for s in stats), forwards),
        "histogram": hist,
        "acceptance_rate": _ratio(sum(s["accepted"] for s in stats), sum(s["drafted"] for s in stats)),
        "block_size": stats[0]["block_size"],
    }


def summarize(records: list[dict]) -> dict:
    """Metrics of one method on one task (or all tasks) from its call records."""
    rates = [call_rates(r) for r in records]
    commit_lists = [r["commits"] for r in records if r["commits"] is not None]
    after_prefill = [c for commits in commit_lists for c in commits[1:]]
    decode_s = sum(r["seconds"] - r["ttft_seconds"] for r in records)
    summary = {
        "calls": len(records),
        "new_tokens": sum(r["new_tokens"] for r in records),
        "seconds": sum(r["seconds"] for r in records),
        "e2e_tok_s": _mean(e for e, _ in rates),
        "e2e_tok_s_sum": _ratio(sum(r["new_tokens"] for r in records), sum(r["seconds"] for r in records)),
        "decode_tok_s": _mean(d for _, d in rates),
        "decode_tok_s_sum": _ratio(sum(r["new_tokens"] - 1 for r in records), decode_s),
        "ttft_s": _mean(r["ttft_seconds"] for r in records),
        "tau_hook": _ratio(sum(after_prefill), len(after_prefill)),
        "tokens_per_target_forward": _ratio(
            sum(r["new_tokens"] for r in records), sum(r["target_forwards"] for r in records)
        ),
        "histogram_hook": hook_histogram(commit_lists),
        "peak_mem_mib": max(r["peak_mem_mib"] for r in records),
        "agreement_rate": _mean(float(r["agrees_with_plain"]) for r in records if "agrees_with_plain" in r),
    }
    if all("library_stats" in r for r in records):
        summary["library"] = library_summary(records)
    summary["tau"] = summary["library"]["tau"] if "library" in summary else summary["tau_hook"]
    return summary


def add_speedups(by_method: dict[str, dict]) -> None:
    """Speedup vs plain for each method, from the rates measured above (means ratio and sums ratio)."""
    base = by_method[PLAIN]
    for summary in by_method.values():
        for rate in ("e2e_tok_s", "e2e_tok_s_sum", "decode_tok_s", "decode_tok_s_sum"):
            summary["speedup_" + rate.replace("_tok_s", "")] = _ratio(summary[rate], base[rate])


def add_identity(by_method: dict[str, dict], identity: list[dict]) -> None:
    for label, summary in by_method.items():
        rows = [r for r in identity if r["method"] == label]
        summary["identical_rate"] = _mean(float(r["identical"]) for r in rows) if rows else None
        summary["identity_mismatches"] = [(r["prompt_id"], r["first_divergence"]) for r in rows if not r["identical"]]
    if identity:
        by_method[PLAIN]["identical_rate"] = 1.0  # the reference itself


def results_table(calls: list[dict], identity: list[dict], labels: list[str], tasks: list[str]) -> dict:
    results = {}
    for task in [*tasks, ALL_TASKS]:
        keep = (lambda r: True) if task == ALL_TASKS else (lambda r, t=task: r["task"] == t)
        by_method = {label: summarize([r for r in calls if r["method"] == label and keep(r)]) for label in labels}
        add_speedups(by_method)
        add_identity(by_method, [r for r in identity if keep(r)])
        results[task] = by_method
    return results


def build_report(calls, identity, methods, target_mib, cases, settings) -> dict:
    tasks = list(dict.fromkeys(c.task for c in cases))
    labels = [m["label"] for m in methods]
    return {
        "meta": {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), **environment()},
        "settings": asdict(settings),
        "definitions": definitions(),
        "target_weights_mib": target_mib,
        "methods": methods,
        "tasks": tasks,
        "prompts": [{"id": c.id, "task": c.task, "prompt_tokens": int(c.input_ids.shape[1])} for c in cases],
        "results": results_table(calls, identity, labels, tasks),
        "calls": calls,
        "identity": identity,
    }


def definitions() -> dict:
    return {
        "e2e_tok_s": "new tokens / seconds of the whole generate() call, prefill included (mean over calls)",
        "decode_tok_s": "(new tokens - 1) / (generate seconds - TTFT of a separate max_new_tokens=1 call)",
        "_sum": "suffix: sum of tokens / sum of seconds instead of the mean of per-call rates",
        "speedup_*": "method rate / plain generate rate, same task and definition",
        "tau": "tokens committed per target forward after the prefill forward, bonus included "
        "(hf_specdec: library stats; others: target forward hook, tau_hook)",
        "peak_mem_mib": "CUDA: max_memory_allocated above the start of the call; CPU: peak RSS above the start, "
        "sampled every 5 ms (lower bound); max over calls",
        "agreement_rate": "calls whose tokens equal plain greedy's in the timing dtype",
        "identical_rate": "calls whose tokens equal plain greedy's in the identity dtype (separate pass)",
    }
