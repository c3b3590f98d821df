"""Host work per speculative step: the milliseconds a decoding loop spends outside model forwards.

On a GPU a target forward of a 1.5B-8B model takes 10-25 ms, so what the loop does on the host between forwards
(building trees in Python, `.tolist()`, small tensor creations, stopping criteria) is paid on every step. On tiny
random models the forwards cost almost nothing, so the host work is what is left, and a CPU can measure it.

How it is measured: forward pre-/post-hooks on the target and on the drafter (or assistant) record when each
top-level model forward starts and ends. A step is the interval between the starts of two consecutive target
forwards: the verification forward, acceptance, commit, cache bookkeeping, the next draft and the next inputs. The
prefill's interval and the last one (which holds the call's tail) are left out. Host ms of a step = the interval
minus the hooked forwards inside it. On a CPU every op is synchronous, so this is the loop's own Python and
small-tensor work; the device time a GPU run waits for at a sync is forward time, not counted here. The drafter's
projection onto the target's LM head (a `F.linear` in hf_specdec, an LM-head module call in transformers' DFlash
path) is not a hooked forward in either, so it counts as host work; at the tiny sizes here it costs microseconds.

Loops compared, on one tiny target (`tiny_models`): hf_specdec's (an argmax chain, which runs in transformers'
assisted loop with hf_specdec's generator; trees, a prompt-lookup branch, the adaptive budget, exact-q sampling
and a batch, which run in hf_specdec's own loop) and transformers' own (plain greedy, assisted generation with a
1-layer assistant, prompt lookup, the DFlash path with the same block drafter's weights, assisted sampling, plain
batched decoding). Each at two context lengths, to see whether a step's host work grows with the context.

Read with the acceptance in mind (`tokens_per_forward`): the random drafter and assistant almost never match the
random target's argmax, so greedy steps commit one token; sampled steps accept most drafts (p and q are both near
uniform). Other jobs on the CPU only add time to a step, so the 10th percentile is the quiet-machine figure.
"""

from __future__ import annotations

import bisect
import gc
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ..models.block_drafter import BlockDrafter
from ..models.settings import DecodingSettings
from .methods import configure_assistant
from .native_dflash import native_dflash_assistant

# method -> (loop, rows, sampling, decoding settings of the block drafter or None for a transformers peer)
METHODS: dict[str, tuple[str, int, bool, dict | None]] = {
    "plain": ("transformers", 1, False, None),
    "hf-assisted": ("transformers", 1, False, None),
    "prompt-lookup": ("transformers", 1, False, None),
    "native-dflash": ("transformers", 1, False, None),
    "chain": ("hf_specdec", 1, False, {"budget": "fixed"}),
    "tree": ("hf_specdec", 1, False, {"budget": "fixed", "tree_budget": 16}),
    "tree+lookup": ("hf_specdec", 1, False, {"budget": "fixed", "tree_budget": 16, "prompt_lookup_tokens": 10}),
    "tree-auto": ("hf_specdec", 1, False, {"budget": "auto", "tree_budget": 16}),
    "hf-assisted-sampling": ("transformers", 1, True, None),
    "sampling": ("hf_specdec", 1, True, {"budget": "fixed", "sample_branches": 2}),
    "plain-batch": ("transformers", 4, False, None),
    "batch": ("hf_specdec", 4, False, {"budget": "fixed"}),
}


@dataclass
class HostOverheadConfig:
    """One run: the tiny models' shape, the contexts, the calls. `batch_size` sets the rows of the batch methods."""

    context_lengths: tuple[int, ...] = (64, 512)
    new_tokens: int = 64
    repeats: int = 3
    methods: tuple[str, ...] = tuple(METHODS)
    block_size: int = 8
    batch_size: int = 4
    vocab_size: int = 1024
    hidden_size: int = 64
    layers: int = 2
    threads: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = sorted(set(self.methods) - set(METHODS))
        if unknown:
            raise ValueError(f"unknown methods {unknown}; known: {list(METHODS)}")
        if not self.context_lengths or min(self.context_lengths) < 2:
            raise ValueError(f"context_lengths must be >= 2 tokens each, got {self.context_lengths}")
        if self.new_tokens < 4:
            raise ValueError(
                f"new_tokens must be >= 4 (a step is the interval between two verifications), got {self.new_tokens}"
            )
        for name in ("repeats", "batch_size", "threads", "layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.block_size < 2:
            raise ValueError(f"block_size must be >= 2, got {self.block_size}")

    @property
    def max_positions(self) -> int:
        return max(self.context_lengths) + self.new_tokens + 2 * self.block_size + 32


@dataclass
class TinyModels:
    target: torch.nn.Module
    assistant: torch.nn.Module  # a 1-layer causal LM with the target's vocabulary (transformers' assisted peer)
    drafter: BlockDrafter
    native: torch.nn.Module  # transformers' DFlash assistant with the drafter's weights


def tiny_models(config: HostOverheadConfig) -> TinyModels:
    """A random Llama target, a 1-layer assistant, a fresh block drafter and its native DFlash twin, in fp32."""

    def llama(layers: int, seed: int) -> LlamaForCausalLM:
        torch.manual_seed(seed)
        shape = LlamaConfig(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            intermediate_size=2 * config.hidden_size,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=config.max_positions,
            bos_token_id=1,
            eos_token_id=None,  # no early stop: every call makes the same number of steps
            pad_token_id=0,
            attn_implementation="sdpa",
        )
        return LlamaForCausalLM(shape).eval()

    target = llama(config.layers, config.seed)
    assistant = llama(1, config.seed + 1)
    configure_assistant(assistant, config.block_size - 1)
    torch.manual_seed(config.seed + 2)
    drafter = BlockDrafter.for_target(target, block_size=config.block_size, mask_token_id=config.vocab_size - 1).eval()
    return TinyModels(target, assistant, drafter, native_dflash_assistant(drafter, target))


class ForwardClock:
    """Start and end times of every top-level forward of the hooked modules (nested calls count once)."""

    def __init__(self, target: torch.nn.Module, others: list[torch.nn.Module]) -> None:
        self.modules = {id(target): True, **{id(m): False for m in others}}
        self.hooked = [target, *others]
        self.events: list[tuple[float, float, bool]] = []  # (start, end, is a target forward)
        self._depth, self._start, self._is_target = 0, 0.0, False

    def _pre(self, module, args) -> None:
        if self._depth == 0:
            self._start, self._is_target = time.perf_counter(), self.modules[id(module)]
        self._depth += 1

    def _post(self, module, args, output) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.events.append((self._start, time.perf_counter(), self._is_target))

    def __enter__(self) -> ForwardClock:
        self.events, self._depth = [], 0
        self.handles = [
            h
            for m in self.hooked
            for h in (m.register_forward_pre_hook(self._pre), m.register_forward_hook(self._post))
        ]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()

    def steps(self) -> list[dict]:
        """Per step (interval between consecutive target-forward starts, the prefill's and the last left out): its
        seconds outside forwards, inside target forwards and inside other forwards."""
        starts = [s for s, _, is_target in self.events if is_target]
        all_starts = [s for s, _, _ in self.events]
        out = []
        for a, b in zip(starts[1:], starts[2:], strict=False):
            inside = self.events[bisect.bisect_left(all_starts, a) : bisect.bisect_left(all_starts, b)]
            target = sum(e - s for s, e, t in inside if t)
            other = sum(e - s for s, e, t in inside if not t)
            out.append({"host": (b - a) - target - other, "target": target, "drafter": other})
        return out


def generation_kwargs(method: str, models: TinyModels, config: HostOverheadConfig) -> dict:
    """The extra `generate` kwargs of `method` (the drafter's decoding settings are set here too)."""
    _, _, sampling, decoding = METHODS[method]
    kwargs = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0} if sampling else {"do_sample": False}
    if decoding is not None:
        models.drafter.decoding = DecodingSettings.from_dict(decoding)
        return kwargs | {"assistant_model": models.drafter}
    if method.startswith("hf-assisted"):
        return kwargs | {"assistant_model": models.assistant}
    if method == "prompt-lookup":
        return kwargs | {"prompt_lookup_num_tokens": config.block_size - 1}
    if method == "native-dflash":
        return kwargs | {"assistant_model": models.native, "speculation_type": "dflash"}
    return kwargs


def prompts(config: HostOverheadConfig, context: int, rows: int) -> torch.LongTensor:
    """(rows, context) random ids (seeded by the context length), never the drafter's mask id."""
    g = torch.Generator().manual_seed(config.seed * 1000 + context)
    return torch.randint(3, config.vocab_size - 1, (rows, context), generator=g)


def measure(method: str, models: TinyModels, config: HostOverheadConfig, context: int) -> dict:
    """One method at one context length: a warm-up call, then `repeats` timed calls; per-step figures over all."""
    loop, rows, _, _ = METHODS[method]
    rows = config.batch_size if rows > 1 else 1
    ids = prompts(config, context, rows)
    kwargs = generation_kwargs(method, models, config)
    call = dict(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
    others = [models.drafter, models.assistant, models.native]
    torch.manual_seed(config.seed)
    models.target.generate(**call, max_new_tokens=min(8, config.new_tokens))  # warm-up (first-call costs)
    steps, forwards, walls, calls_host = [], [], [], []
    for repeat in range(config.repeats):
        torch.manual_seed(config.seed + repeat)
        gc.collect()
        with ForwardClock(models.target, others) as clock:
            start = time.perf_counter()
            out = models.target.generate(**call, max_new_tokens=config.new_tokens)
            wall = time.perf_counter() - start
        steps += clock.steps()
        forwards.append(sum(1 for *_, t in clock.events if t))
        walls.append(wall)
        calls_host.append(wall - sum(e - s for s, e, _ in clock.events))
    new = out.shape[1] - context
    host = [1e3 * s["host"] for s in steps]
    if not host:
        raise ValueError(f"{method}: {max(forwards)} target forwards leave no whole step to time; raise new_tokens")
    return {
        "method": method,
        "loop": loop,
        "context": context,
        "rows": rows,
        "new_tokens": new,
        "target_forwards": statistics.mean(forwards),
        "tokens_per_forward": (new - 1) / max(1.0, statistics.mean(forwards) - 1),  # per row, prefill excluded
        "steps_timed": len(host),
        "host_ms_median": statistics.median(host),
        "host_ms_mean": statistics.fmean(host),
        "host_ms_p10": _quantile(host, 0.1),  # preemption by other jobs only adds time: the quiet-machine figure
        "host_ms_p90": _quantile(host, 0.9),
        "target_ms_per_step": statistics.median(1e3 * s["target"] for s in steps),
        "drafter_ms_per_step": statistics.median(1e3 * s["drafter"] for s in steps),
        "call_host_ms": statistics.median(1e3 * x for x in calls_host),  # outside every forward, whole call
        "call_ms": statistics.median(1e3 * x for x in walls),
    }


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.floor(q * len(ordered)))]


def wait_for_quiet(max_load: float, timeout_s: float = 1800.0, poll_s: float = 15.0) -> float:
    """Wait until the 1-minute load average is below `max_load` (or `timeout_s` passed); returns the load seen."""
    deadline = time.monotonic() + timeout_s
    load = os.getloadavg()[0]
    while load >= max_load and time.monotonic() < deadline:
        time.sleep(poll_s)
        load = os.getloadavg()[0]
    return round(load, 2)


def run_host_overhead(config: HostOverheadConfig) -> dict:
    """Every method at every context length, on `config.threads` torch threads; the report dict."""
    from .environment import environment, load_average

    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    load_at_start = load_average()
    try:
        models = tiny_models(config)
        results = [measure(m, models, config, c) for c in config.context_lengths for m in config.methods]
        env = environment()
    finally:
        torch.set_num_threads(threads)
    env["machine"]["load_average_at_start"] = load_at_start
    return {"config": asdict(config), "environment": env, "results": results, "context_growth": growth(results)}


def growth(results: list[dict]) -> dict[str, float]:
    """Per method: host ms per step at the longest context minus at the shortest (0 = independent of context)."""
    by_method: dict[str, dict[int, float]] = {}
    for r in results:
        by_method.setdefault(r["method"], {})[r["context"]] = r["host_ms_median"]
    return {m: by[max(by)] - by[min(by)] for m, by in by_method.items() if len(by) > 1}


def markdown(report: dict) -> str:
    """The report as markdown: the machine, then host ms per step for every method and context."""
    env, cfg = report["environment"], report["config"]
    machine = env["machine"]
    contexts = cfg["context_lengths"]
    lines = [
        "# Host overhead per speculative step",
        "",
        f"Machine: {machine['cpu']} ({', '.join(machine['cpu_flags']) or 'no SIMD flags read'}), "
        f"{machine['torch_threads']} torch thread(s), load average {machine['load_average_at_start']} at start, "
        f"{machine['load_average_at_end']} at end; torch {env['versions']['torch']}, "
        f"transformers {env['versions']['transformers']}.",
        f"Tiny random Llama target (vocab {cfg['vocab_size']}, hidden {cfg['hidden_size']}, {cfg['layers']} layers), "
        f"block size {cfg['block_size']}, {cfg['new_tokens']} new tokens, {cfg['repeats']} timed calls per cell; "
        "host ms = median (10th percentile) per step of the time outside target and drafter forwards; growth = "
        "median at the longest context minus at the shortest.",
        "",
        "| method | loop | rows | "
        + " | ".join(f"host ms/step @{c} (p10)" for c in contexts)
        + " | growth ms | target fwd ms/step | drafter fwd ms/step | tokens/forward |",
        "|---|---|---:|" + "---:|" * len(contexts) + "---:|---:|---:|---:|",
    ]
    cells = {(r["method"], r["context"]): r for r in report["results"]}
    for method in cfg["methods"]:
        rows = [cells[(method, c)] for c in contexts]
        first = rows[0]
        grown = report["context_growth"].get(method, float("nan"))
        lines.append(
            f"| {method} | {first['loop']} | {first['rows']} | "
            + " | ".join(f"{r['host_ms_median']:.3f} ({r['host_ms_p10']:.3f})" for r in rows)
            + f" | {grown:+.3f} | {first['target_ms_per_step']:.3f} | {first['drafter_ms_per_step']:.3f} | "
            f"{first['tokens_per_forward']:.2f} |"
        )
    return "\n".join(lines) + "\n"


__all__ = [
    "METHODS",
    "ForwardClock",
    "HostOverheadConfig",
    "TinyModels",
    "markdown",
    "measure",
    "run_host_overhead",
    "tiny_models",
    "wait_for_quiet",
]
