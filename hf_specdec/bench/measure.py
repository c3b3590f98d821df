"""Measuring one `generate` call: TTFT, wall time, peak memory and the KV-cache length at each target forward.

tau for every method comes from the forward pre-hook (`ForwardRecorder`): before target forward j > 1 the cache
holds every committed token but the newest, so the commits of each forward follow from the recorded lengths.
"""

from __future__ import annotations

import itertools
import os
import resource
import threading
import time
from collections.abc import Callable

import torch

from ..models.pard.ar_choice import blocks_by_choice
from .cases import Case
from .methods import Method, Settings


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
    before = blocks_by_choice(method.drafter) if method.drafter is not None else {}
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
        after = blocks_by_choice(method.drafter)  # sampled blocks of this call by way of drafting (`ar_choice.py`)
        if after:
            record["library_stats"]["sampled_blocks"] = {m: n - before.get(m, 0) for m, n in after.items()}
    return record, tokens
