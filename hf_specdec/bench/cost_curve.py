"""The machine's cost curve, printed at the top of every benchmark report: one target forward over n new tokens.

Whether drafting can pay depends on it more than on the drafter (verifying 8 tokens cost 1.1x one token on one CPU
and 2.7x on another), so a report that does not show it cannot be read on another machine. Measured on a scratch
cache holding `context` tokens (the prompt of a typical step), median of `reps` forwards per size, the cache cropped
back after each.
"""

from __future__ import annotations

import inspect
import statistics
import time

import torch
from transformers import DynamicCache, PreTrainedModel

SIZES = (1, 2, 4, 8, 16, 32)


@torch.no_grad()
def measure_cost_curve(target: PreTrainedModel, context: int = 200, sizes=SIZES, reps: int = 3) -> dict:
    """{"context", "ms": {n: ms per forward}, "x_one": {n: ms / ms at n=1}} for the target as loaded."""
    vocab = target.get_input_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, context + max(sizes)), generator=g).to(target.device)
    cache = DynamicCache()
    arg = "cache" if "cache" in inspect.signature(target.forward).parameters else "past_key_values"
    target(ids[:, :context], **{arg: cache}, use_cache=True)
    ms = {}
    for n in sizes:
        times = []
        for _ in range(reps + 1):  # the first forward of a size warms up
            start = time.perf_counter()
            out = target(ids[:, context : context + n], **{arg: cache}, use_cache=True)
            out.logits[0, -1, 0].item()  # wait for the device
            times.append(time.perf_counter() - start)
            cache.crop(-n)
        ms[n] = 1000 * statistics.median(times[1:])
    return {"context": context, "ms": ms, "x_one": {n: ms[n] / ms[sizes[0]] for n in sizes}}


def cost_curve_line(curve: dict | None) -> str:
    """One markdown/text line: `cost curve (ms per target forward over n new tokens, C-token cache): ...`."""
    if not curve:
        return "- cost curve: not measured"
    cells = ", ".join(f"{n}: {ms:.0f} ms ({curve['x_one'][n]:.2f}x)" for n, ms in curve["ms"].items())
    return f"- cost curve (one target forward over n new tokens, {curve['context']}-token cache): {cells}"


__all__ = ["SIZES", "cost_curve_line", "measure_cost_curve"]
