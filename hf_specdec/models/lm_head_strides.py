"""Keep the target's LM head off a slow CPU path.

With torch 2.13 on CPU in bf16, `F.linear` with a weight that does not require grad (a frozen target, e.g. after
`requires_grad_(False)`) on a 3-D input that is a slice with a non-standard stride (for example `hidden[:, -1:]`,
which transformers' `logits_to_keep=1` produces at every prefill, or `hidden[:, 1:]`) takes a path about 40x
slower: ~1.1 s instead of ~25 ms for a 151,936 x 1,536 head (measured here). Copying such inputs into a fresh
tensor first gives identical logits at normal speed. `.contiguous()` is not enough: a size-1 dim with an odd
stride already counts as contiguous, so the copy is made explicitly.
"""

from __future__ import annotations

import torch
from torch import nn

_HOOK_ATTR = "_hf_specdec_stride_hook"


def has_standard_strides(x: torch.Tensor) -> bool:
    """True when `x`'s strides are exactly the row-major strides of its shape (size-1 dims included)."""
    expected, step = [], 1
    for size in reversed(x.shape):
        expected.append(step)
        step *= size
    return tuple(reversed(expected)) == x.stride()


def _copy_odd_strides(module: nn.Module, args: tuple) -> tuple | None:
    x = args[0]
    if x.dim() >= 3 and not has_standard_strides(x):
        return (x.new_empty(x.shape).copy_(x), *args[1:])
    return None


def fix_lm_head_strides(model: nn.Module) -> None:
    """Install (once) a pre-hook on `model`'s output embeddings that re-lays oddly strided inputs.

    Logits are unchanged; only the memory layout of the head's input is. Safe to call repeatedly.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or getattr(head, _HOOK_ATTR, None) is not None:
        return
    setattr(head, _HOOK_ATTR, head.register_forward_pre_hook(_copy_odd_strides))


__all__ = ["fix_lm_head_strides", "has_standard_strides"]
