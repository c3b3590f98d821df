"""Weight-only int8 linear layers, for drafter passes that read a token or a few at a time.

On a CPU such a pass reads every weight once and computes little, so it costs about the bytes it reads: int8
weights with one scale per output row halve them against bf16. The matmul is torch's `_weight_int8pack_mm` (the CPU
kernel torchao's int8 weight-only path and gpt-fast call), fed the activations in their own dtype. A draft drawn
through such layers is drawn from the q they compute, and that q is what acceptance reads: the output stays the
target's, only how often a draft is kept can move (docs/verification.md 1.4).
"""

from __future__ import annotations

import copy
import inspect
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn
from transformers import DynamicCache


def int8_available(device: torch.device | str) -> bool:
    """Whether torch has the int8 weight-only kernel for `device` (the CPU)."""
    return torch.device(device).type == "cpu" and hasattr(torch.ops.aten, "_weight_int8pack_mm")


class Int8Linear(nn.Module):
    """y = x W^T + b with W stored as int8 rows times one scale per row (symmetric, round to nearest)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        w = weight.detach().float()  # (N, K)
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0  # (N,)
        self.register_buffer("weight_int8", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale.to(weight.dtype))  # (N,) in the layer's dtype
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)
        self.in_features, self.out_features = w.shape[1], w.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)  # (M, K)
        y = torch.ops.aten._weight_int8pack_mm(flat, self.weight_int8, self.scale.to(x.dtype))  # (M, N)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def dequantized(self) -> torch.Tensor:
        """(N, K) the weight these layers multiply by, in float32."""
        return self.weight_int8.float() * self.scale.float()[:, None]


def int8_copy(model: nn.Module) -> nn.Module:
    """A copy of `model` whose every `nn.Linear` is an `Int8Linear`; its other weights (embeddings, norms) are
    shared with `model`, not copied."""
    shared = {id(p): p for p in model.parameters()}  # the copy's modules point at the same weights; linears replaced
    quantized = copy.deepcopy(model, memo=shared)
    for parent in list(quantized.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, Int8Linear(child.weight, child.bias))
    return quantized


def pass_seconds(
    ways: dict[str, tuple[nn.Module, Callable[[torch.Tensor], torch.Tensor]]],
    context: int = 32,
    reps: int = 5,
    width: int = 1,
) -> dict[str, float]:
    """Median seconds of a pass over `width` tokens (a decoder step over a `context`-token cache, then its head at
    the last token) for each way of running one LM: name -> (decoder, head). The ways take turns, so a machine that
    slows down mid-way slows them alike; each gets one untimed pass first."""
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    caches = {}
    with torch.inference_mode():
        for name, (decoder, head) in ways.items():
            device = next(decoder.parameters()).device
            arg = "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"
            ids = torch.zeros(1, context, dtype=torch.long, device=device)  # (1, context) id 0: every vocabulary has it
            cache = DynamicCache()
            decoder(input_ids=ids, use_cache=True, **{arg: cache})
            fed = torch.zeros(1, width, dtype=torch.long, device=device)  # (1, width) the tokens each pass feeds
            caches[name] = (decoder, head, arg, cache, fed)
        for rep in range(reps + 1):
            for name, (decoder, head, arg, cache, fed) in caches.items():
                start = time.perf_counter()
                out = decoder(input_ids=fed, use_cache=True, **{arg: cache})
                head(out.last_hidden_state[:, -1]).float().sum().item()  # the host read a chain's draw makes
                if rep:
                    seconds[name].append(time.perf_counter() - start)
                cache.crop(-width)  # back to the context
    return {name: statistics.median(s) for name, s in seconds.items()}


def widest_faster(narrow: dict[str, float], wide: dict[str, float], width: int) -> float:
    """The widest pass (in tokens) that "int8" runs faster than "as_loaded", from their seconds for one token
    (`narrow`) and for `width` tokens (`wide`), each way's seconds a straight line in the tokens fed: 0 where int8
    loses one token, infinity where it wins at both widths (weight-only int8 kernels are made for one-token rows;
    a wide pass, the prompt, can run several times slower through them than as loaded)."""
    if narrow["int8"] >= narrow["as_loaded"]:
        return 0
    gain, loss = narrow["as_loaded"] - narrow["int8"], wide["int8"] - wide["as_loaded"]
    if loss <= 0:
        return float("inf")
    return 1 + (width - 1) * gain / (gain + loss)  # where the two lines cross


__all__ = ["Int8Linear", "int8_available", "int8_copy", "pass_seconds", "widest_faster"]
