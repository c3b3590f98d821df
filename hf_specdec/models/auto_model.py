"""`transformers.AutoModel.from_pretrained` on a published drafter layout, after `import hf_specdec`.

A published drafter's `config.json` names no hf_specdec kind: AMD's PARD-1/PARD-2 folders name their causal LM's
`model_type` (AutoModel would build the bare decoder and drop the LM head and the mask token's meaning), z-lab's
DFlash names `qwen3` with remote code, transformers' native DFlash names `muse_glimmer_assistant`, speculators its
own. So `install` wraps `AutoModel.from_pretrained` (that class only: `AutoModelForCausalLM` still loads a PARD
folder as the plain LM it also is): a folder or Hub id whose config one of `models/formats/` recognises loads with
`load_drafter` as the base that drafts as the format does; anything else goes to transformers unchanged. No remote
code runs either way.
"""

from __future__ import annotations

import functools
import os

from transformers import AutoModel

from .checkpoints import read_config_dict
from .registry import published_format

_HUB = ("revision", "cache_dir", "token", "local_files_only", "subfolder")
_original = AutoModel.from_pretrained.__func__


@functools.wraps(_original)
def _from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
    if (
        cls is AutoModel
        and not args
        and "config" not in kwargs
        and _is_published(pretrained_model_name_or_path, kwargs)
    ):
        from .loading import load_drafter

        kwargs.pop("trust_remote_code", None)  # never needed: the layout is read natively
        return load_drafter(pretrained_model_name_or_path, **kwargs)
    return _original(cls, pretrained_model_name_or_path, *args, **kwargs)


def _is_published(name_or_path, kwargs: dict) -> bool:
    if not isinstance(name_or_path, (str, os.PathLike)):
        return False
    try:
        config = read_config_dict(name_or_path, **{k: kwargs[k] for k in _HUB if k in kwargs})
    except (OSError, ValueError):
        return False  # transformers' own loader says what is wrong
    return published_format(config) is not None


def install() -> None:
    """Wrap `AutoModel.from_pretrained` (idempotent)."""
    AutoModel.from_pretrained = classmethod(_from_pretrained)


__all__ = ["install"]
