"""Per-step time of hf_specdec's own decoding loop, single sequence and batch, through `generate()` only.

Imports nothing but torch, transformers and hf_specdec's public API (no other module of this package), so
`scripts/step_time.py --library OTHER_CHECKOUT` loads this file on its own and times another version of the
library with the same code. Greedy: every version does identical work (the same tokens, the same number of target
forwards), so `ms_per_step` = best `generate()` seconds / target forwards compares their loops directly, and
`outside_target_ms_per_step` isolates what the loop itself adds (the target's forwards, the noisy bulk on a CPU,
excluded). Settings timed: a best-first tree of 8 plus a 10-token lookup branch and a tree of 4 (one sequence,
hf_specdec's loop) and an argmax chain for 2 identical rows (the batched path).
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

import hf_specdec
from hf_specdec import BlockDrafter, DecodingSettings

SETTINGS = {
    "tree8+lookup10": (DecodingSettings(tree_budget=8, prompt_lookup_tokens=10), 1),
    "tree4": (DecodingSettings(tree_budget=4), 1),
    "batch2 chain": (DecodingSettings(), 2),
}
CODE_PROMPT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'


def tiny_pair() -> tuple[torch.nn.Module, BlockDrafter, torch.LongTensor, int]:
    """A random 2-layer Llama target (vocab 256), a fresh block-8 drafter, a 24-token prompt, 64 new tokens."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        attn_implementation="sdpa",
    )
    target = LlamaForCausalLM(config).eval()
    drafter = BlockDrafter.for_target(target, block_size=8, mask_token_id=255).eval()
    return target, drafter, torch.randint(3, 250, (1, 24)), 64


def real_pair(target_path: str, drafter_path: str) -> tuple[torch.nn.Module, torch.nn.Module, torch.LongTensor, int]:
    """A saved target and drafter in bf16, a short code prompt, 24 new tokens."""
    target = AutoModelForCausalLM.from_pretrained(target_path, dtype=torch.bfloat16).eval()
    drafter = hf_specdec.load_drafter(drafter_path, dtype=torch.bfloat16).eval()  # any base, any head
    prompt = AutoTokenizer.from_pretrained(target_path)(CODE_PROMPT, return_tensors="pt").input_ids
    return target, drafter, prompt, 24


def time_setting(target, drafter, prompt, new_tokens: int, settings: DecodingSettings, rows: int, reps: int) -> dict:
    """Best of `reps` greedy `generate()` calls (after one warm-up), per target forward: the whole step, and the
    part outside the target's forwards (drafter, trees, acceptance, cache bookkeeping: what the loop adds)."""
    drafter.decoding = settings
    ids = prompt.repeat(rows, 1)
    kwargs = {"max_new_tokens": new_tokens, "do_sample": False, "assistant_model": drafter}
    if rows > 1:
        kwargs["attention_mask"] = torch.ones_like(ids)
    target.generate(ids, **kwargs)
    inside = [0.0, 0.0]  # [start of the forward in flight, seconds inside target forwards]
    hooks = [
        target.register_forward_pre_hook(lambda *_: inside.__setitem__(0, time.perf_counter())),
        target.register_forward_hook(lambda *_: inside.__setitem__(1, inside[1] + time.perf_counter() - inside[0])),
    ]
    best, best_outside = float("inf"), float("inf")
    try:
        for _ in range(reps):
            inside[1] = 0.0
            start = time.perf_counter()
            out = target.generate(ids, **kwargs)
            seconds = time.perf_counter() - start
            best, best_outside = min(best, seconds), min(best_outside, seconds - inside[1])
    finally:
        for hook in hooks:
            hook.remove()
    stats = drafter.last_acceptance_stats
    steps = stats.target_forwards  # real forwards (a batch counts each once), prefill included
    return {
        "ms_per_step": 1000 * best / steps,
        "outside_target_ms_per_step": 1000 * best_outside / steps,
        "steps": steps,
        "tau": stats.tau,
        "last_tokens": out[0, -8:].tolist(),
    }


def machine() -> dict:
    """CPU model, SIMD/matrix flags (a CPU forward's speed depends on them), threads, torch and transformers."""
    import transformers

    info = {"platform": platform.platform(), "threads": torch.get_num_threads(), "torch": torch.__version__}
    info["transformers"] = transformers.__version__
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []:
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            info.setdefault("cpu", value.strip())
        elif key.strip() == "flags":
            wanted = ("avx", "amx", "fma")
            info.setdefault("cpu_flags", [f for f in value.split() if f.startswith(wanted) or "bf16" in f])
    info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return info


def run(which: str, reps: int, target_path: str | None = None, drafter_path: str | None = None) -> dict:
    """Time every setting on the tiny pair or on a real target and drafter; returns a JSON-ready dict."""
    torch.set_num_threads(int(os.environ.get("HF_SPECDEC_THREADS", torch.get_num_threads())))
    pair = tiny_pair() if which == "tiny" else real_pair(target_path, drafter_path)
    results = {name: time_setting(*pair, settings, rows, reps) for name, (settings, rows) in SETTINGS.items()}
    return {"library": hf_specdec.__file__, "which": which, "machine": machine(), "results": results}


__all__ = ["run", "time_setting"]
