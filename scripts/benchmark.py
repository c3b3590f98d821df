"""Benchmark hf_specdec drafters against plain `generate`, HF assisted generation and prompt lookup, in one run.

    # small CPU run (2 prompts each of HumanEval and GSM8K, an untrained drafter, fp32 identity check;
    # --threads 1 because this 2-core machine is shared with other jobs)
    python scripts/benchmark.py --target qwen2.5-coder-1.5b --drafter fresh:8 --assistant qwen2.5-coder-0.5b \
        --prompt-lookup 10 --tasks humaneval gsm8k --num-prompts 2 --max-new-tokens 48 --repeats 1 \
        --check-identity-dtype float32 --threads 1 --out-dir results/

    # a trained drafter (drafters/<target>/, once the repository has one) next to a fresh one, all four tasks,
    # 3 interleaved repeats, no fp32 pass
    python scripts/benchmark.py --target qwen2.5-coder-1.5b --drafter b8=drafters/qwen2.5-coder-1.5b \
        fresh:8 --num-prompts 10 --max-new-tokens 256 --repeats 3 --check-identity-dtype none

    # a published DFlash drafter vs plain generate, on a GPU machine with Hub access
    python scripts/benchmark.py --target /models/Qwen3-8B --drafter z-lab/Qwen3-8B-DFlash-b16 --assistant none \
        --prompt-lookup 0 --device cuda --max-new-tokens 1024

Prompt sets come from PyPI packages (see scripts/prompt_sets.py, which names the pip command). `--target` and
`--assistant` take a folder, a Hub id, or an offline name of scripts/offline_models.py (built on first use).
`--drafter` takes one or more of: a saved drafter (folder or Hub id), `fresh:K` (untrained, block size K, seeded),
each optionally labelled `LABEL=SPEC`.

Protocol (after Spec-Bench and the DFlash harness, batch size 1, greedy):
  * every method runs in the same process on the same target: plain greedy `generate`; HF assisted generation with
    `--assistant` (constant schedule, `--assistant-tokens` drafts per step, `assistant_confidence_threshold=0`, so it
    drafts a fixed block like a block drafter and keeps no state between calls); HF prompt lookup
    (`prompt_lookup_num_tokens=N`); each hf_specdec drafter (`assistant_model=drafter`);
  * one warm-up `generate` per method (16 new tokens, first prompt), then `--repeats` rounds over the prompts;
    per prompt the methods run in a rotated order (interleaved), each doing a `generate(max_new_tokens=1)` (time
    to first token, TTFT) and the full `generate`;
  * `fix_lm_head_strides` is installed on every model (targets and assistant), so all methods get the fast CPU head.

Metrics (per method and task, and over all tasks):
  * e2e tok/s:    new tokens / wall time of the whole `generate` call (prefill included);
  * decode tok/s: (new tokens - 1) / (generate time - TTFT), TTFT from the separate max_new_tokens=1 call;
  * speedup:      method tok/s / plain tok/s; "x" = ratio of the per-call means, "x(sum)" = ratio of
                  (sum of tokens / sum of seconds);
  * tau:          tokens committed per target forward after the first (prefill) one, bonus token included. For
                  hf_specdec drafters from `last_acceptance_stats`; for every method also measured with a forward
                  pre-hook on the target that reads the KV-cache length at each forward (so the prefill forward of
                  HF assisted generation, which also verifies drafts, is excluded the same way);
  * histogram:    verification forwards that accepted exactly a drafts (hf_specdec: library stats; others: hook);
  * peak mem:     CUDA: max_memory_allocated during the call minus memory allocated before it; CPU: peak RSS
                  above the RSS at call start, sampled every 5 ms (a lower bound: the allocator reuses freed memory);
                  weights are listed separately;
  * agree:        share of calls whose tokens equal plain greedy's for the same prompt, in the timing dtype
                  (bf16 verify numerics may legitimately diverge);
  * identical:    the same check in a separate `--check-identity-dtype` pass (fp32 by default), one call per
                  method and prompt, with freshly loaded models; exact methods must score 1.0.

Outputs in --out-dir: benchmark.json (all calls and summaries), benchmark.md (tables, machine, versions, settings),
benchmark.png (acceptance histograms and speedup per task; needs matplotlib, else skipped with a note).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import math
import os
import platform
import resource
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import torch
from tqdm.auto import tqdm

import hf_specdec

SCRIPTS = Path(__file__).resolve().parent
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

DEFAULT_TASKS = ["humaneval", "gsm8k", "mtbench", "creative"]
PLAIN = "plain"
WARMUP_TOKENS = 16  # new tokens of each warm-up call (first-call costs, not steady state)
ALL_TASKS = "all"


# --------------------------------------------------------------------------- settings, cases, methods


@dataclass
class Settings:
    """What every timed call shares. temperature 0 = greedy; > 0 = pure temperature sampling (top-k/top-p off)."""

    dtype: str = "bfloat16"
    device: str = "cpu"
    max_new_tokens: int = 128
    repeats: int = 1
    warmup: int = 1
    assistant_tokens: int = 7
    prompt_lookup: int = 10
    identity_dtype: str | None = "float32"
    temperature: float = 0.0
    identity_new_tokens: int | None = None  # new tokens per identity call (default: max_new_tokens)
    identity_all_methods: bool = False  # also check the peers (transformers' own methods), not only hf_specdec

    @property
    def do_sample(self) -> bool:
        return self.temperature > 0

    def generation_kwargs(self) -> dict:
        if not self.do_sample:
            return {"do_sample": False}
        return {"do_sample": True, "temperature": self.temperature, "top_k": 0, "top_p": 1.0}


@dataclass
class Case:
    """One tokenized prompt: `input_ids` is (1, P) on the CPU."""

    id: str
    task: str
    input_ids: torch.Tensor


@dataclass
class Models:
    """Everything one pass needs, in one dtype: the target, the optional assistant, the drafters by label."""

    target: torch.nn.Module
    assistant: torch.nn.Module | None = None
    drafters: dict[str, torch.nn.Module] = field(default_factory=dict)


@dataclass
class Method:
    """A way to call `target.generate`: extra kwargs, and the drafter whose stats to read (hf_specdec only)."""

    label: str
    kind: str  # plain | assisted | prompt_lookup | hf_specdec
    gen_kwargs: dict = field(default_factory=dict)
    drafter: torch.nn.Module | None = None
    extra_module: torch.nn.Module | None = None  # weights on top of the target's (assistant or drafter)
    settings: dict = field(default_factory=dict)  # for the report

    def describe(self) -> dict:
        return {
            "label": self.label,
            "kind": self.kind,
            "settings": self.settings,
            "extra_weights_mib": self.extra_mib(),
        }

    def extra_mib(self) -> float:
        if self.extra_module is None:
            return 0.0
        return sum(p.numel() * p.element_size() for p in self.extra_module.parameters()) / 2**20


def configure_assistant(assistant, num_tokens: int) -> dict:
    """Fixed draft length and no confidence early-stop, so each call drafts `num_tokens` and keeps no state.

    transformers reads these from the assistant's generation config (not from `generate` kwargs); the default
    "heuristic" schedule and the ROC-tuned threshold would carry state from one call to the next.
    """
    knobs = {
        "num_assistant_tokens": num_tokens,
        "num_assistant_tokens_schedule": "constant",
        "assistant_confidence_threshold": 0.0,
    }
    for name, value in knobs.items():
        setattr(assistant.generation_config, name, value)
    return knobs


def build_methods(models: Models, settings: Settings) -> list[Method]:
    methods = [Method(PLAIN, "plain")]
    if models.assistant is not None:
        knobs = configure_assistant(models.assistant, settings.assistant_tokens)
        kwargs = {"assistant_model": models.assistant}
        methods.append(Method("hf-assisted", "assisted", kwargs, extra_module=models.assistant, settings=knobs))
    if settings.prompt_lookup > 0:
        kwargs = {"prompt_lookup_num_tokens": settings.prompt_lookup}
        methods.append(Method("prompt-lookup", "prompt_lookup", kwargs, settings=kwargs))
    for label, drafter in models.drafters.items():
        knobs = {
            "block_size": drafter.config.block_size,
            "target_layer_ids": list(drafter.config.target_layer_ids),
            "decoding": drafter.decoding.to_dict(),
        }
        methods.append(Method(label, "hf_specdec", {"assistant_model": drafter}, drafter, drafter, knobs))
    return methods


# --------------------------------------------------------------------------- measuring one call


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB; lifetime peak


class PeakMemory:
    """Peak memory above the start of the block, in MiB (CUDA: allocated; CPU: RSS sampled every 5 ms)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.peak_mib = 0.0

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            self.base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        else:
            self.base = self.peak = _rss_bytes()
            self.stop = threading.Event()
            self.thread = threading.Thread(target=self._sample, daemon=True)
            self.thread.start()
        return self

    def _sample(self) -> None:
        while not self.stop.wait(0.005):
            self.peak = max(self.peak, _rss_bytes())

    def __exit__(self, *exc) -> None:
        if self.cuda:
            peak = torch.cuda.max_memory_allocated()
        else:
            self.stop.set()
            self.thread.join()
            peak = max(self.peak, _rss_bytes())
        self.peak_mib = max(0, peak - self.base) / 2**20


class ForwardRecorder:
    """Forward pre-hook on the target: the KV-cache length at the start of each target forward."""

    def __init__(self, target: torch.nn.Module):
        self.target = target
        self.cache_lengths: list[int | None] = []

    def _hook(self, module, args, kwargs) -> None:
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        length = cache.get_seq_length() if cache is not None and hasattr(cache, "get_seq_length") else None
        self.cache_lengths.append(0 if length is None and not self.cache_lengths else length)

    def __enter__(self):
        self.cache_lengths = []
        self.handle = self.target.register_forward_pre_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self.handle.remove()


def commits_per_forward(cache_lengths: list[int | None], prompt_len: int, new_tokens: int) -> list[int] | None:
    """Tokens committed by each target forward (len = number of forwards), or None if a length is unknown.

    Before forward j > 1 the cache holds every committed token but the newest: committed so far = L_j - P + 1.
    """
    if any(length is None for length in cache_lengths[1:]):
        return None
    bounds = [prompt_len - 1, *cache_lengths[1:], prompt_len + new_tokens - 1]
    return [b - a for a, b in itertools.pairwise(bounds)]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def generate(target, method: Method, case: Case, max_new_tokens: int, settings: Settings) -> torch.Tensor:
    """(new_tokens,) generated ids, on the CPU."""
    input_ids = case.input_ids.to(target.device)
    out = target.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=max_new_tokens,
        **settings.generation_kwargs(),
        **method.gen_kwargs,
    )
    return out[0, input_ids.shape[1] :].cpu()


def timed(fn: Callable, device: torch.device):
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - start


def measure_call(target, method: Method, case: Case, settings: Settings) -> tuple[dict, torch.Tensor]:
    """Time TTFT and the full call of one method on one prompt; returns (record, generated ids)."""
    device = target.device
    _, ttft = timed(lambda: generate(target, method, case, 1, settings), device)
    with PeakMemory(device) as mem, ForwardRecorder(target) as rec:
        tokens, seconds = timed(lambda: generate(target, method, case, settings.max_new_tokens, settings), device)
    n, prompt_len = int(tokens.shape[0]), int(case.input_ids.shape[1])
    record = {
        "task": case.task,
        "prompt_id": case.id,
        "method": method.label,
        "prompt_tokens": prompt_len,
        "new_tokens": n,
        "seconds": seconds,
        "ttft_seconds": ttft,
        "target_forwards": len(rec.cache_lengths),
        "commits": commits_per_forward(rec.cache_lengths, prompt_len, n),
        "peak_mem_mib": mem.peak_mib,
    }
    if method.drafter is not None:
        stats = method.drafter.last_acceptance_stats
        record["library_stats"] = {**stats.to_dict(), "accepted": sum(stats.accepted), "drafted": sum(stats.drafted)}
    return record, tokens


# --------------------------------------------------------------------------- passes


def rotated(methods: list[Method], offset: int) -> list[Method]:
    k = offset % len(methods)
    return methods[k:] + methods[:k]


def first_divergence(a: torch.Tensor, b: torch.Tensor) -> int | None:
    """Index of the first differing new token (length mismatch counts), None when equal."""
    n = min(len(a), len(b))
    diff = (a[:n] != b[:n]).nonzero()
    if len(diff):
        return int(diff[0, 0])
    return None if len(a) == len(b) else n


def timing_pass(target, methods: list[Method], cases: list[Case], settings: Settings) -> list[dict]:
    """Warm-up, then `repeats` interleaved rounds; one record per (repeat, prompt, method)."""
    for method in methods:
        for _ in range(settings.warmup):
            generate(target, method, cases[0], min(settings.max_new_tokens, WARMUP_TOKENS), settings)
    records = []
    bar = tqdm(total=settings.repeats * len(cases) * len(methods), desc=f"timing ({settings.dtype})")
    for repeat in range(settings.repeats):
        for i, case in enumerate(cases):
            outputs = {}
            for method in rotated(methods, i + repeat):
                record, outputs[method.label] = measure_call(target, method, case, settings)
                records.append({**record, "repeat": repeat})
                bar.update(1)
            if not settings.do_sample:  # samples differ from plain's by design
                mark_agreement(records[-len(methods) :], outputs)
    bar.close()
    return records


def mark_agreement(records: list[dict], outputs: dict[str, torch.Tensor]) -> None:
    for record in records:
        pos = first_divergence(outputs[record["method"]], outputs[PLAIN])
        record["agrees_with_plain"], record["first_divergence"] = pos is None, pos


def identity_pass(target, methods: list[Method], cases: list[Case], settings: Settings) -> list[dict]:
    """One untimed call per method and prompt; each output compared with plain greedy's."""
    records = []
    n = settings.identity_new_tokens or settings.max_new_tokens
    checked = [m for m in methods[1:] if settings.identity_all_methods or m.kind == "hf_specdec"]
    for case in tqdm(cases, desc=f"identity ({settings.identity_dtype})"):
        reference = generate(target, methods[0], case, n, settings)
        for method in checked:
            pos = first_divergence(generate(target, method, case, n, settings), reference)
            records.append(
                {
                    "task": case.task,
                    "prompt_id": case.id,
                    "method": method.label,
                    "identical": pos is None,
                    "first_divergence": pos,
                }
            )
    return records


def release(models: Models) -> None:
    for module in (models.target, models.assistant, *models.drafters.values()):
        if module is not None:
            module.to("meta")
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_benchmark(
    make_models: Callable[[str], Models],
    cases: list[Case],
    settings: Settings,
    on_timing_done: Callable[[dict], None] | None = None,
) -> dict:
    """Timing pass in `settings.dtype`, then (optionally) the identity pass with models rebuilt in that dtype.

    `on_timing_done` gets the timing-only report before the identity pass starts (so a long identity pass never
    costs the timing results)."""
    load_at_start = _load_average()
    models = make_models(settings.dtype)
    methods = build_methods(models, settings)
    descriptions = [m.describe() for m in methods]
    target_mib = sum(p.numel() * p.element_size() for p in models.target.parameters()) / 2**20
    calls = timing_pass(models.target, methods, cases, settings)
    if on_timing_done is not None:
        on_timing_done(build_report(calls, [], descriptions, target_mib, cases, settings))
    identity = []
    if settings.identity_dtype:
        release(models)
        del models, methods
        models = make_models(settings.identity_dtype)
        identity = identity_pass(models.target, build_methods(models, settings), cases, settings)
    release(models)
    report = build_report(calls, identity, descriptions, target_mib, cases, settings)
    report["meta"]["machine"]["load_average_at_start"] = load_at_start
    return report


# --------------------------------------------------------------------------- summaries


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
    forwards = sum(s["verify_forwards"] for s in stats)
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


def environment() -> dict:
    import transformers

    cuda = torch.cuda.is_available()
    return {
        "machine": {
            "platform": platform.platform(),
            "cpu": _cpu_name(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "load_average_at_end": _load_average(),  # 1/5/15-min; above cpu_count = other jobs shared the CPU
            "gpu": torch.cuda.get_device_name(0) if cuda else None,
        },
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "hf_specdec": hf_specdec.__version__,
        },
    }


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# --------------------------------------------------------------------------- output


COLUMNS = [
    ("e2e tok/s", "e2e_tok_s", "{:.2f}"),
    ("e2e x", "speedup_e2e", "{:.2f}"),
    ("e2e x(sum)", "speedup_e2e_sum", "{:.2f}"),
    ("dec tok/s", "decode_tok_s", "{:.2f}"),
    ("dec x", "speedup_decode", "{:.2f}"),
    ("dec x(sum)", "speedup_decode_sum", "{:.2f}"),
    ("tau", "tau", "{:.2f}"),
    ("agree", "agreement_rate", "{:.2f}"),
    ("ident", "identical_rate", "{:.2f}"),
    ("mem MiB", "peak_mem_mib", "{:.0f}"),
]


def _cell(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return fmt.format(value)


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
    return lines


def write_plot(report: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed; skipping the plot (pip install matplotlib)")
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


def plot_speedups(ax, report: dict) -> None:
    tasks = list(report["results"])
    labels = [m["label"] for m in report["methods"] if m["label"] != PLAIN]
    width = 0.8 / max(len(labels), 1)
    for i, label in enumerate(labels):
        ys = [report["results"][t][label]["speedup_e2e"] for t in tasks]
        ax.bar([j + i * width for j in range(len(tasks))], ys, width, label=label)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(tasks))], tasks)
    ax.set(title="end-to-end speedup vs plain generate", ylabel="x")
    ax.legend()


def _json_safe(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def write_outputs(report: dict, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "benchmark.json", "md": out_dir / "benchmark.md", "png": out_dir / "benchmark.png"}
    paths["json"].write_text(json.dumps(_json_safe(report), indent=1) + "\n")
    paths["md"].write_text(format_markdown(report))
    if not write_plot(report, paths["png"]):
        del paths["png"]
    return paths


# --------------------------------------------------------------------------- models and prompts (CLI side)


@dataclass(frozen=True)
class DrafterSpec:
    """`fresh:K` (seeded, untrained) or a saved drafter's folder / Hub id, with a label."""

    label: str
    source: str
    block_size: int | None = None  # fresh drafters only
    seed: int = 0
    decoding: tuple = ()  # (name, value) pairs of hf_specdec.DecodingSettings

    @classmethod
    def parse(cls, text: str, seed: int = 0) -> DrafterSpec:
        text, _, options = text.partition("@")
        decoding = tuple((k, _number(v)) for k, _, v in (o.partition("=") for o in options.split(",") if o))
        hf_specdec.DecodingSettings.from_dict(dict(decoding))  # fail early on a bad option
        label, _, spec = text.partition("=") if "=" in text else ("", "", text)
        if spec.startswith("fresh:"):
            k = int(spec.split(":", 1)[1])
            return cls(label or f"fresh-b{k}", "fresh", k, seed, decoding)
        return cls(label or Path(spec.rstrip("/")).name, spec, None, seed, decoding)

    def build(self, target, dtype: torch.dtype):
        if self.source == "fresh":
            torch.manual_seed(self.seed)  # same weights in every dtype (built in fp32, then cast)
            drafter = hf_specdec.BlockDrafter.for_target(target, block_size=self.block_size).eval()
        else:
            drafter = hf_specdec.load_drafter(self.source, dtype=dtype).to(target.device).eval()
        if self.decoding:  # options override the checkpoint's own settings
            drafter.decoding = {**drafter.decoding.to_dict(), **dict(self.decoding)}
        return drafter


def _number(text: str):
    """'8' -> 8, '0.5' -> 0.5, anything else as is."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def resolve_model(name: str) -> str:
    """A folder or Hub id as is; an offline name of scripts/offline_models.py built (once) and returned."""
    from offline_models import MODELS, ensure_model

    if name in MODELS and not Path(name).exists():
        return str(ensure_model(name))
    return name


def load_causal_lm(path: str, dtype: torch.dtype, device: torch.device):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    hf_specdec.fix_lm_head_strides(model)
    return model


def model_factory(target_path: str, assistant_path: str | None, drafters: list[DrafterSpec], device: torch.device):
    def make(dtype_name: str) -> Models:
        dtype = getattr(torch, dtype_name)
        target = load_causal_lm(target_path, dtype, device)
        assistant = load_causal_lm(assistant_path, dtype, device) if assistant_path else None
        return Models(target, assistant, {spec.label: spec.build(target, dtype) for spec in drafters})

    return make


def encode_prompts(tokenizer, prompts: list[dict]) -> list[Case]:
    """Chat items through the chat template (generation prompt added); text items tokenized as is."""
    cases = []
    for item in prompts:
        if "messages" in item:
            enc = tokenizer.apply_chat_template(
                item["messages"], add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            ids = enc["input_ids"]
        else:
            ids = tokenizer(item["text"], return_tensors="pt")["input_ids"]
        cases.append(Case(item["id"], item["task"], ids))
    return cases


def load_cases(tokenizer, tasks: list[str], num_prompts: int, seed: int) -> list[Case]:
    from prompt_sets import load_prompts

    return encode_prompts(tokenizer, [p for task in tasks for p in load_prompts(task, num_prompts, seed)])


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="qwen2.5-coder-1.5b", help="folder, Hub id or offline model name")
    p.add_argument(
        "--drafter",
        nargs="+",
        default=["fresh:8"],
        metavar="[LABEL=]SPEC[@OPTS]",
        help="saved drafter (folder / Hub id) or fresh:K; several allowed. OPTS: DecodingSettings as "
        "name=value,... e.g. drafters/x@tree_budget=8,prompt_lookup_tokens=10",
    )
    p.add_argument("--assistant", default="qwen2.5-coder-0.5b", help="HF assisted-generation model, or 'none'")
    p.add_argument(
        "--assistant-tokens",
        type=int,
        default=7,
        help="drafts per step of the assistant (constant schedule, confidence threshold 0)",
    )
    p.add_argument(
        "--prompt-lookup",
        type=int,
        default=10,
        metavar="N",
        help="prompt_lookup_num_tokens for HF prompt lookup decoding (0: skip)",
    )
    p.add_argument("--tasks", nargs="+", default=DEFAULT_TASKS, choices=DEFAULT_TASKS)
    p.add_argument("--num-prompts", type=int, default=5, help="prompts per task (0: all)")
    p.add_argument("--seed", type=int, default=0, help="prompt sampling seed (also seeds fresh drafters)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="0: greedy (identity checked); > 0: sampling at this temperature (top-k/top-p off, no identity pass)",
    )
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--repeats", type=int, default=1, help="interleaved rounds over all prompts, after the warm-up")
    p.add_argument(
        "--check-identity-dtype",
        default="float32",
        choices=["float32", "bfloat16", "float16", "none"],
        help="dtype of the separate greedy-identity pass ('none': skip)",
    )
    p.add_argument(
        "--identity-new-tokens", type=int, default=None, help="new tokens per identity call (default: --max-new-tokens)"
    )
    p.add_argument(
        "--identity-all-methods",
        action="store_true",
        help="check HF assisted and prompt lookup too (default: hf_specdec drafters only)",
    )
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1, ...")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch intra-op threads (0: torch's default). On a CPU shared with other jobs, 1 avoids "
        "threads waiting on a preempted peer (measured here: 2.4 vs 0.5-0.8 tok/s on 2 busy cores)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=None,
        metavar="C",
        help="instead of the per-prompt benchmark: concurrent requests (continuous batching server) vs plain "
        "batched generate at each of these concurrencies, e.g. 1 4 8 16 32 (greedy)",
    )
    p.add_argument("--requests", type=int, default=4, help="--concurrency: requests per level (at least C)")
    p.add_argument("--out-dir", type=Path, default=Path("results"))
    return p.parse_args(argv)


def settings_from_args(args: argparse.Namespace, device: torch.device) -> Settings:
    return Settings(
        dtype=args.dtype,
        device=str(device),
        max_new_tokens=args.max_new_tokens,
        repeats=args.repeats,
        assistant_tokens=args.assistant_tokens,
        prompt_lookup=args.prompt_lookup,
        identity_dtype=_identity_dtype(args),
        temperature=args.temperature,
        identity_new_tokens=args.identity_new_tokens,
        identity_all_methods=args.identity_all_methods,
    )


def _identity_dtype(args: argparse.Namespace) -> str | None:
    """The identity pass needs greedy decoding; sampled outputs differ from plain's by design."""
    return None if args.check_identity_dtype == "none" or args.temperature > 0 else args.check_identity_dtype


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoTokenizer

    args = parse_args(argv)
    start = time.perf_counter()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    target_path = resolve_model(args.target)
    assistant_path = None if args.assistant.lower() == "none" else resolve_model(args.assistant)
    drafters = [DrafterSpec.parse(d, seed=args.seed) for d in args.drafter]
    cases = load_cases(AutoTokenizer.from_pretrained(target_path), args.tasks, args.num_prompts, args.seed)
    settings = settings_from_args(args, device)
    meta = {
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]) if argv is None else shlex.join(argv),
        "target": target_path,
        "assistant": assistant_path,
        "drafters": [asdict(d) for d in drafters],
    }

    def timing_done(partial: dict) -> None:
        partial["meta"].update(meta, wall_seconds=time.perf_counter() - start)
        print(f"timing report: {write_outputs(partial, args.out_dir / 'timing_only')['json']}")

    if args.concurrency:
        return concurrency_main(args, target_path, drafters, cases, device, meta, start)
    report = run_benchmark(
        model_factory(target_path, assistant_path, drafters, device), cases, settings, on_timing_done=timing_done
    )
    report["meta"].update(meta, wall_seconds=time.perf_counter() - start)
    paths = write_outputs(report, args.out_dir)
    print(format_text_table(report))
    print(f"wall time {report['meta']['wall_seconds']:.0f} s; wrote {', '.join(str(p) for p in paths.values())}")
    return 0


def concurrency_main(args, target_path, drafters, cases, device, meta, start) -> int:
    from concurrency import run_concurrency, write

    models = model_factory(target_path, None, drafters, device)(args.dtype)
    pad = models.target.generation_config.pad_token_id
    pad = pad if pad is not None else models.target.generation_config.eos_token_id
    pad = pad[0] if isinstance(pad, list) else pad
    by_task: dict[str, list] = {}
    for case in cases:
        by_task.setdefault(case.task, []).append(case.input_ids[0])
    prompts = [p for group in itertools.zip_longest(*by_task.values()) for p in group if p is not None]  # tasks mixed
    report = run_concurrency(
        models.target, models.drafters, prompts, args.concurrency, args.requests, args.max_new_tokens, pad
    )
    report["meta"] = meta | {"wall_seconds": time.perf_counter() - start, "environment": environment()}
    paths = write(report, args.out_dir)
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
