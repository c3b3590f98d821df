"""The LM-head pre-hook re-lays oddly strided inputs (the torch CPU bf16 slow path) without changing logits."""

from __future__ import annotations

import torch
from conftest import make_drafter, tiny_target

from hf_specdec import fix_lm_head_strides
from hf_specdec.models.lm_head_strides import has_standard_strides


def test_stride_detection():
    h = torch.randn(1, 7, 16)
    assert has_standard_strides(h)
    assert not has_standard_strides(h[:, -1:])  # what logits_to_keep=1 produces
    assert not has_standard_strides(h[:, 1:])
    assert h[:, -1:].is_contiguous()  # why `.contiguous()` would not help
    assert has_standard_strides(h[0, 1:])  # the 2-D input our drafter passes


def test_hook_copies_odd_inputs_and_keeps_logits():
    target = tiny_target("llama").to(torch.bfloat16)
    head = target.get_output_embeddings()
    h = torch.randn(1, 9, 64, dtype=torch.bfloat16)
    before = head(h[:, -1:])
    fix_lm_head_strides(target)
    fix_lm_head_strides(target)  # idempotent: one hook
    assert len(head._forward_pre_hooks) == 1
    seen = []
    head.register_forward_pre_hook(lambda m, args: seen.append(has_standard_strides(args[0])))  # runs after the fix
    after = head(h[:, -1:])
    assert torch.equal(before, after)
    assert seen == [True]


def test_decode_path_never_feeds_the_head_odd_strides():
    target = tiny_target("qwen3")
    drafter = make_drafter(target, 8)
    fix_lm_head_strides(target)  # the generator installs it too; the spy must run after it
    seen = []
    target.get_output_embeddings().register_forward_pre_hook(lambda m, args: seen.append(has_standard_strides(args[0])))
    target.generate(torch.randint(3, 250, (1, 12)), max_new_tokens=20, assistant_model=drafter)
    assert seen and all(seen)
