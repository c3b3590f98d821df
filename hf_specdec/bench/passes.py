"""The benchmark's passes over the prompts: warm-up, the interleaved timing pass, the identity pass.

`run_benchmark` runs them all and returns the report dict (see `summary.build_report`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TypeVar

import torch
from tqdm.auto import tqdm

from .cases import Case
from .cost_curve import measure_cost_curve
from .environment import load_average
from .measure import generate, measure_call
from .methods import PLAIN, Method, Models, Settings, build_methods
from .summary import build_report

T = TypeVar("T")
WARMUP_TOKENS = 16  # new tokens of each warm-up call (first-call costs, not steady state)


def rotated(items: list[T], offset: int) -> list[T]:
    """`items` starting at `offset` (modulo its length): each round of a timing pass puts another method first."""
    k = offset % len(items)
    return items[k:] + items[:k]


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
    checked = [m for m in methods[1:] if settings.identity_all_methods or m.kind in ("hf_specdec", "native_dflash")]
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
    load_at_start = load_average()
    models = make_models(settings.dtype)
    curve = measure_cost_curve(models.target)
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
    report["meta"]["cost_curve"] = curve
    return report
