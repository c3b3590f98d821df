"""From call records to the report dict: per task (and over all tasks) and per method rates, speedups, tau,
acceptance histograms, memory, agreement and identity. Definitions of every metric are in `definitions()`.

Speedups over plain `generate` come three ways: the ratio of the per-call mean rates ("x"), the ratio of summed
tokens over summed seconds ("x(sum)"), and the geometric mean over prompts of the per-prompt rate ratio ("x(geo)"),
the call of a method paired with plain's call on the same prompt in the same repeat. Each carries a +-2 standard
error band on the log scale, with the prompt as the unit (repeats of a prompt averaged first)."""

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
    ways: dict[str, int] = {}  # sampled blocks by way of drafting, for drafters that choose per block
    for s in stats:
        for m, n in s.get("sampled_blocks", {}).items():
            ways[m] = ways.get(m, 0) + n
    return {
        "sampled_blocks": ways,
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


Pair = tuple[dict, dict]  # (a method's call, plain's call on the same prompt in the same repeat)
RATE_PARTS = {  # rate = tokens / seconds of one call, per rate definition
    "e2e": lambda r: (r["new_tokens"], r["seconds"]),
    "decode": lambda r: (r["new_tokens"] - 1, r["seconds"] - r["ttft_seconds"]),
}


def pairs_by_prompt(records: list[dict], base: list[dict]) -> dict[tuple, list[Pair]]:
    """The method's calls paired with plain's by (task, prompt id, repeat), grouped by prompt."""
    plain = {(r["task"], r["prompt_id"], r.get("repeat", 0)): r for r in base}
    grouped: dict[tuple, list[Pair]] = {}
    for r in records:
        match = plain.get((r["task"], r["prompt_id"], r.get("repeat", 0)))
        if match is not None:
            grouped.setdefault((r["task"], r["prompt_id"]), []).append((r, match))
    return grouped


def _band(point: float, prompt_terms: list[float]) -> list[float]:
    """[lo, hi] = point * [exp(-2 SE), exp(+2 SE)]; SE = stdev of the prompts' log-scale terms / sqrt(prompts)."""
    if len(prompt_terms) < 2 or not math.isfinite(point) or point <= 0:
        return [math.nan, math.nan]
    se = statistics.stdev(prompt_terms) / math.sqrt(len(prompt_terms))
    return [point * math.exp(-2 * se), point * math.exp(2 * se)]


def paired_speedups(grouped: dict[tuple, list[Pair]], parts, mean_point: float, sum_point: float) -> dict:
    """Geometric mean of the per-prompt rate ratios and the +-2 SE bands of the three speedups, for one rate.

    Per pair i (method m, plain p; n tokens, t seconds, rate n / t):
      x(geo): exp(mean over prompts of the prompt's mean of log(rate_m / rate_p));
      x:      log(mean rate_m / mean rate_p) linearised: u_i = rate_m / mean(rate_m) - rate_p / mean(rate_p);
      x(sum): log((sum n_m / sum t_m) / (sum n_p / sum t_p)) linearised:
              u_i = n_m / mean(n_m) - t_m / mean(t_m) - n_p / mean(n_p) + t_p / mean(t_p).
    A prompt's term is the mean over its repeats; SE = stdev of the prompt terms / sqrt(prompts) (delta method,
    clustered by prompt). Pairs whose rate is not finite and positive (decode: TTFT >= call time) are left out.
    """
    rows = {}
    for key, pairs in grouped.items():
        kept = []
        for m, p in pairs:
            (nm, tm), (np_, tp) = parts(m), parts(p)
            if nm > 0 and tm > 0 and np_ > 0 and tp > 0:
                kept.append((nm, tm, np_, tp))
        if kept:
            rows[key] = kept
    flat = [v for kept in rows.values() for v in kept]
    if not flat:
        return {"geo": math.nan, "geo_2se": [math.nan] * 2, "2se": [math.nan] * 2, "sum_2se": [math.nan] * 2}
    log_ratio = {
        k: statistics.fmean(math.log((nm / tm) / (np_ / tp)) for nm, tm, np_, tp in v) for k, v in rows.items()
    }
    geo = math.exp(statistics.fmean(log_ratio.values()))
    mean_rm = statistics.fmean(nm / tm for nm, tm, _, _ in flat)
    mean_rp = statistics.fmean(np_ / tp for _, _, np_, tp in flat)
    means = [statistics.fmean(col) for col in zip(*flat, strict=True)]  # mean n_m, t_m, n_p, t_p
    u_mean, u_sum = [], []
    for v in rows.values():
        u_mean.append(statistics.fmean(nm / tm / mean_rm - np_ / tp / mean_rp for nm, tm, np_, tp in v))
        u_sum.append(
            statistics.fmean(nm / means[0] - tm / means[1] - np_ / means[2] + tp / means[3] for nm, tm, np_, tp in v)
        )
    return {
        "geo": geo,
        "geo_2se": _band(geo, list(log_ratio.values())),
        "2se": _band(mean_point, u_mean),
        "sum_2se": _band(sum_point, u_sum),
    }


def add_paired_speedups(by_method: dict[str, dict], records: dict[str, list[dict]]) -> None:
    """speedup_{e2e,decode}_geo, their _2se bands and those of speedup_* and speedup_*_sum (see paired_speedups)."""
    for label, summary in by_method.items():
        grouped = pairs_by_prompt(records[label], records[PLAIN])
        summary["paired_prompts"] = len(grouped)
        for rate, parts in RATE_PARTS.items():
            name = "speedup_" + rate
            paired = paired_speedups(grouped, parts, summary[name], summary[name + "_sum"])
            summary[name + "_geo"] = paired["geo"]
            summary[name + "_geo_2se"] = paired["geo_2se"]
            summary[name + "_2se"] = paired["2se"]
            summary[name + "_sum_2se"] = paired["sum_2se"]


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
        records = {label: [r for r in calls if r["method"] == label and keep(r)] for label in labels}
        by_method = {label: summarize(rows) for label, rows in records.items()}
        add_speedups(by_method)
        add_paired_speedups(by_method, records)
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
        "speedup_*_geo": "geometric mean over prompts of the per-prompt rate ratio, method / plain on the same prompt "
        "and repeat (repeats of a prompt averaged on the log scale); at equal token counts, plain's seconds / the "
        "method's",
        "*_2se": "[lo, hi] = speedup * [exp(-2 SE), exp(+2 SE)] (log scale), SE over prompts (paired_prompts of them): "
        "_geo: of the per-prompt mean log ratios; mean and _sum ratios: delta method, clustered by prompt",
        "tau": "tokens committed per target forward after the prefill forward, bonus included "
        "(hf_specdec: library stats; others: target forward hook, tau_hook)",
        "peak_mem_mib": "CUDA: max_memory_allocated above the start of the call; CPU: peak RSS above the start, "
        "sampled every 5 ms (lower bound); max over calls",
        "agreement_rate": "calls whose tokens equal plain greedy's in the timing dtype",
        "identical_rate": "calls whose tokens equal plain greedy's in the identity dtype (separate pass)",
    }
