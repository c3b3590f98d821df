"""`benchmark.py --concurrency`: throughput and latency of concurrent requests, drafted vs plain batched generate.

At each concurrency c, the same N requests (N = max(c, --requests), prompts cycled) are all submitted at t = 0:
- plain: `target.generate` on left-padded batches of c requests, one batch after another;
- each drafter: `hf_specdec.SpeculativeServer(max_batch_size=c)`, continuous batching (a finished request's place
  is taken by the next one at the following step).
Throughput = generated tokens / wall seconds; latency = seconds from t = 0 to a request's last token (queueing
included, for both). Greedy outputs are compared request by request (they must be identical).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

import hf_specdec


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
    stats = hf_specdec.AcceptanceStats.combine([r.row.generator.stats for r in requests])
    return [r.new_tokens for r in requests], [r.finished_at - start for r in requests], seconds, stats.tau


def run_concurrency(
    target, drafters: dict, prompts: list[torch.Tensor], levels: list[int], requests: int, max_new_tokens: int, pad: int
) -> dict:
    rows = []
    for c in levels:
        batch = [prompts[i % len(prompts)] for i in range(max(c, requests))]
        plain, plain_done, plain_s = plain_batches(target, batch, c, max_new_tokens, pad)
        plain_tokens = sum(len(t) for t in plain)
        base = {"concurrency": c, "requests": len(batch), "method": "plain batched generate"}
        rows.append(base | _figures(plain_tokens, plain_s, plain_done) | {"throughput_ratio": 1.0})
        plain_rate = rows[-1]["tokens_per_s"]
        print(_line(rows[-1]), flush=True)
        for label, drafter in drafters.items():
            out, done, seconds, tau = served(target, drafter, batch, c, max_new_tokens, pad)
            tokens = sum(len(t) for t in out)
            figures = _figures(tokens, seconds, done)
            rows.append(
                {"concurrency": c, "requests": len(batch), "method": label, "tau": tau}
                | figures
                | {
                    "throughput_ratio": figures["tokens_per_s"] / plain_rate,
                    "identical": sum(a == b for a, b in zip(out, plain, strict=True)),
                }
            )
            print(_line(rows[-1]), flush=True)
    return {"levels": levels, "max_new_tokens": max_new_tokens, "rows": rows}


def _figures(tokens: int, seconds: float, finished: list[float]) -> dict:
    lat = sorted(finished)
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
    lines = [
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
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "concurrency.json", out_dir / "concurrency.md"]
    paths[0].write_text(json.dumps(report, indent=1))
    paths[1].write_text(markdown(report) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return paths
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
    fig.savefig(out_dir / "concurrency.png", dpi=120)
    paths.append(out_dir / "concurrency.png")
    return paths
