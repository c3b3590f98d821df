"""`benchmark.py --concurrency`: throughput and latency of concurrent requests, drafted vs plain batched generate.

At each concurrency c, the same N requests (N = max(c, --requests), prompts cycled) are all submitted at t = 0:
- plain: `target.generate` on left-padded batches of c requests, one batch after another;
- each drafter: `hf_specdec.SpeculativeServer(max_batch_size=c)`, continuous batching (a finished request's place
  is taken by the next one at the following step).
Each level first runs every method once untimed (a warm-up: a server measures its step-cost curve at a new load in
its first steps and keeps it, and torch warms up at new shapes), then `rounds` timed rounds, the methods in a
rotated order each round. Throughput = generated tokens / wall seconds, summed over the rounds; latency = seconds
from t = 0 to a request's last token (queueing included, for both), over every round's requests. Greedy outputs are
compared request by request, every round (they must be identical). `check_identity`
(scripts/concurrency_identity.py) does that comparison alone, in fp32 on the real target.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

import hf_specdec

from .cases import interleaved_prompts, load_cases
from .cost_curve import cost_curve_line
from .model_specs import load_causal_lm, resolve_model
from .passes import rotated
from .plots import write_concurrency_plot
from .prompt_sets import TASKS


def plain_batches(target, prompts: list[torch.Tensor], c: int, max_new_tokens: int, pad: int):
    """Plain batched greedy generate over `prompts` in batches of c; (outputs, finish times, seconds)."""
    outputs, finished, start = [], [], time.perf_counter()
    for i in range(0, len(prompts), c):
        chunk = prompts[i : i + c]
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for j, p in enumerate(chunk):
            ids[j, width - len(p) :], mask[j, width - len(p) :] = p, 1
        with torch.no_grad():
            out = target.generate(
                ids.to(target.device),
                attention_mask=mask.to(target.device),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=pad,
            )
        now = time.perf_counter() - start
        for j in range(len(chunk)):
            outputs.append(_strip(out[j, width:].cpu(), target.generation_config.eos_token_id, pad))
            finished.append(now)
    return outputs, finished, time.perf_counter() - start


def _strip(new: torch.Tensor, eos, pad: int) -> list[int]:
    """Generated tokens up to and including the first EOS (the padding after it dropped)."""
    eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    tokens = []
    for t in new.tolist():
        tokens.append(t)
        if t in eos:
            break
    while tokens and tokens[-1] == pad and pad not in eos:
        tokens.pop()
    return tokens


def served(target, drafter, prompts: list[torch.Tensor], c: int, max_new_tokens: int, pad: int):
    """The same requests through the continuous-batching server; (outputs, finish times, seconds, tau)."""
    server = hf_specdec.SpeculativeServer(target, drafter, max_batch_size=c, do_sample=False, pad_token_id=pad)
    start = time.perf_counter()
    requests = [server.submit(p, max_new_tokens) for p in prompts]
    server.run()
    seconds = time.perf_counter() - start
    stats = hf_specdec.AcceptanceStats.combine([r.stats for r in requests])
    return [r.new_tokens for r in requests], [r.finished_at - start for r in requests], seconds, stats.tau


def pad_token_id(target) -> int:
    """The target's pad token, else its (first) EOS token."""
    pad = target.generation_config.pad_token_id
    pad = pad if pad is not None else target.generation_config.eos_token_id
    return pad[0] if isinstance(pad, list) else pad


def run_concurrency(
    target,
    drafters: dict,
    prompts: list[torch.Tensor],
    levels: list[int],
    requests: int,
    max_new_tokens: int,
    pad: int,
    rounds: int = 1,
) -> dict:
    rows = []
    for c in levels:
        batch = [prompts[i % len(prompts)] for i in range(max(c, requests))]
        methods = {"plain batched generate": None, **drafters}
        for drafter in methods.values():  # the warm-up round, untimed
            _one_run(target, drafter, batch, c, max_new_tokens, pad)
        runs: dict[str, list[tuple]] = {label: [] for label in methods}
        for r in range(rounds):
            for label in rotated(list(methods), r):
                runs[label].append(_one_run(target, methods[label], batch, c, max_new_tokens, pad))
        plain_runs = runs.pop("plain batched generate")
        base = {"concurrency": c, "requests": len(batch) * rounds, "method": "plain batched generate"}
        rows.append(base | _figures(plain_runs) | {"throughput_ratio": 1.0})
        plain_rate = rows[-1]["tokens_per_s"]
        print(_line(rows[-1]), flush=True)
        for label, done in runs.items():
            figures = _figures(done)
            pairs = zip(done, plain_runs, strict=True)  # each round's outputs against plain's in the same round
            same = sum(a == b for (out, *_), (ref, *_) in pairs for a, b in zip(out, ref, strict=True))
            rows.append(
                {"concurrency": c, "requests": len(batch) * rounds, "method": label}
                | {"tau": sum(run[3] for run in done) / len(done)}
                | figures
                | {"throughput_ratio": figures["tokens_per_s"] / plain_rate, "identical": same}
            )
            print(_line(rows[-1]), flush=True)
    return {"levels": levels, "max_new_tokens": max_new_tokens, "rounds": rounds, "warmup_rounds": 1, "rows": rows}


def _one_run(target, drafter, batch: list[torch.Tensor], c: int, max_new_tokens: int, pad: int) -> tuple:
    """(outputs, finish times, seconds, tau) of plain batched generate (`drafter` None) or the server."""
    if drafter is None:
        return (*plain_batches(target, batch, c, max_new_tokens, pad), 1.0)
    return served(target, drafter, batch, c, max_new_tokens, pad)


def _figures(runs: list[tuple]) -> dict:
    """Tokens, seconds and throughput summed over `runs` ((outputs, finish times, seconds, tau) each), latency over
    all their requests."""
    tokens = sum(len(t) for out, *_ in runs for t in out)
    seconds = sum(run[2] for run in runs)
    lat = sorted(t for _, finished, *_ in runs for t in finished)
    return {
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "latency_mean_s": sum(lat) / len(lat),
        "latency_p90_s": lat[min(len(lat) - 1, int(0.9 * len(lat)))],
    }


def _line(row: dict) -> str:
    extra = f" tau {row['tau']:.2f} identical {row['identical']}/{row['requests']}" if "tau" in row else ""
    return (
        f"c={row['concurrency']:>3} {row['method']:<24} {row['tokens_per_s']:6.2f} tok/s "
        f"x{row['throughput_ratio']:.2f} latency mean {row['latency_mean_s']:.1f} s{extra}"
    )


def markdown(report: dict) -> str:
    meta = report.get("meta", {})
    machine = meta.get("environment", {}).get("machine", {})
    lines = [
        f"- machine: {machine.get('cpu', '?')} ({machine.get('cpu_count', '?')} cores, flags "
        f"{' '.join(machine.get('cpu_flags', []))}), gpu {machine.get('gpu')}",
        cost_curve_line(meta.get("cost_curve")),
        f"- per level: {report.get('warmup_rounds', 0)} untimed warm-up round(s) of every method, then "
        f"{report.get('rounds', 1)} timed round(s); figures over the timed rounds, {report['max_new_tokens']} new "
        "tokens per request",
        "",
        "| concurrency | method | tok/s | vs plain | tau | mean latency (s) | p90 latency (s) | identical |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        tau = f"{r['tau']:.2f}" if "tau" in r else "-"
        same = f"{r['identical']}/{r['requests']}" if "identical" in r else "-"
        lines.append(
            f"| {r['concurrency']} | {r['method']} | {r['tokens_per_s']:.2f} | {r['throughput_ratio']:.2f}x | {tau} | "
            f"{r['latency_mean_s']:.1f} | {r['latency_p90_s']:.1f} | {same} |"
        )
    return "\n".join(lines)


def write(report: dict, out_dir: Path) -> list[Path]:
    """concurrency.json, concurrency.md and (with matplotlib, the bench extra) concurrency.png in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "concurrency.json", out_dir / "concurrency.md"]
    paths[0].write_text(json.dumps(report, indent=1))
    paths[1].write_text(markdown(report) + "\n")
    if write_concurrency_plot(report, out_dir / "concurrency.png"):
        paths.append(out_dir / "concurrency.png")
    return paths


def check_identity(
    target: str, drafters: list[str], concurrency: int, num_prompts: int, max_new_tokens: int, out: Path
) -> dict:
    """fp32 on the CPU: how many requests each drafter's server returns token-identical to plain batched greedy.

    `num_prompts` per task of all four tasks; prints one line per drafter and writes the result as JSON to `out`.
    """
    from transformers import AutoTokenizer

    path = resolve_model(target)
    model = load_causal_lm(path, torch.float32, torch.device("cpu"))
    prompts = interleaved_prompts(load_cases(AutoTokenizer.from_pretrained(path), list(TASKS), num_prompts, 0))
    pad = model.generation_config.pad_token_id or 0
    plain, _, _ = plain_batches(model, prompts, concurrency, max_new_tokens, pad)
    result = {"concurrency": concurrency, "requests": len(prompts), "max_new_tokens": max_new_tokens}
    for spec in drafters:
        drafter = hf_specdec.load_drafter(spec, dtype=torch.float32).eval()
        outputs, _, _, tau = served(model, drafter, prompts, concurrency, max_new_tokens, pad)
        same = sum(a == b for a, b in zip(outputs, plain, strict=True))
        result[spec] = {"identical": same, "tau": tau}
        print(f"{spec}: {same}/{len(prompts)} identical in fp32, tau {tau:.2f}", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    return result
