"""The entry of scripts/benchmark.py: from its parsed arguments to the report files (or the concurrency runs).

The protocol and the metrics are described in scripts/benchmark.py's `--help`; the pieces live in this package:
methods and settings in `methods`, one timed call in `measure`, the passes in `passes`, the numbers in `summary`,
the files in `report`.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict

import torch

from .cases import Case, interleaved_prompts, load_cases
from .concurrency import pad_token_id, run_concurrency, write
from .cost_curve import cost_curve_line, measure_cost_curve
from .environment import environment
from .methods import Settings
from .model_specs import DrafterSpec, model_factory, pick_device, resolve_model
from .passes import run_benchmark
from .report import format_text_table, write_outputs


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
        top_p=args.top_p,
        identity_new_tokens=args.identity_new_tokens,
        identity_all_methods=args.identity_all_methods,
        native_dflash=None if args.native_dflash is None else tuple(args.native_dflash),
    )


def _identity_dtype(args: argparse.Namespace) -> str | None:
    """The identity pass needs greedy decoding; sampled outputs differ from plain's by design."""
    return None if args.check_identity_dtype == "none" or args.temperature > 0 else args.check_identity_dtype


def run(args: argparse.Namespace, command: str) -> int:
    """Run the benchmark `args` (scripts/benchmark.py's flags) asks for; `command` is recorded in the report."""
    from transformers import AutoTokenizer

    start = time.perf_counter()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    target_path = resolve_model(args.target)
    assistant_path = None if args.assistant.lower() == "none" else resolve_model(args.assistant)
    drafters = [DrafterSpec.parse(d, seed=args.seed) for d in args.drafter]
    cases = load_cases(AutoTokenizer.from_pretrained(target_path), args.tasks, args.num_prompts, args.seed)
    meta = {
        "command": command,
        "target": args.target,  # as given (an offline model's name, a Hub id): no machine path in the report
        "assistant": None if assistant_path is None else args.assistant,
        "drafters": [asdict(d) for d in drafters],
    }
    if args.concurrency:
        return _run_concurrency(args, model_factory(target_path, None, drafters, device), cases, meta, start)

    def timing_done(partial: dict) -> None:
        partial["meta"].update(meta, wall_seconds=time.perf_counter() - start)
        print(f"timing report: {write_outputs(partial, args.out_dir / 'timing_only')['json']}")

    settings = settings_from_args(args, device)
    make_models = model_factory(target_path, assistant_path, drafters, device)
    report = run_benchmark(make_models, cases, settings, on_timing_done=timing_done)
    report["meta"].update(meta, wall_seconds=time.perf_counter() - start)
    paths = write_outputs(report, args.out_dir)
    print(cost_curve_line(report["meta"].get("cost_curve")))
    print(format_text_table(report))
    print(f"wall time {report['meta']['wall_seconds']:.0f} s; wrote {', '.join(str(p) for p in paths.values())}")
    return 0


def _run_concurrency(args: argparse.Namespace, make_models, cases: list[Case], meta: dict, start: float) -> int:
    """`--concurrency`: the server with each drafter vs plain batched generate, tasks mixed (see `concurrency`)."""
    models = make_models(args.dtype)
    curve = measure_cost_curve(models.target)
    prompts = interleaved_prompts(cases)
    report = run_concurrency(
        models.target,
        models.drafters,
        prompts,
        args.concurrency,
        args.requests,
        args.max_new_tokens,
        pad_token_id(models.target),
        rounds=args.repeats,
    )
    report["meta"] = meta | {
        "wall_seconds": time.perf_counter() - start,
        "environment": environment(),
        "cost_curve": curve,
    }
    paths = write(report, args.out_dir)
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0
