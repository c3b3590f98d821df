"""The models a benchmark compares, as named on the command line, and how they are loaded in a given dtype.

`--target` and `--assistant` take a folder, a Hub id, or a name of `offline_models.MODELS` (built on first use);
`--drafter` takes `DrafterSpec`s: a saved drafter (folder or Hub id) or `fresh:K`, optionally `LABEL=SPEC@OPTS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

import hf_specdec

from .methods import Models


@dataclass(frozen=True)
class DrafterSpec:
    """`fresh:K` (seeded, untrained) or a saved drafter's folder / Hub id, with a label."""

    label: str
    source: str
    block_size: int | None = None  # fresh drafters only
    seed: int = 0
    decoding: tuple = ()  # (name, value) pairs of hf_specdec.DecodingSettings

    @classmethod
    def parse(cls, text: str, seed: int = 0) -> DrafterSpec:
        text, _, options = text.partition("@")
        decoding = tuple((k, _number(v)) for k, _, v in (o.partition("=") for o in options.split(",") if o))
        hf_specdec.DecodingSettings.from_dict(dict(decoding))  # fail early on a bad option
        label, _, spec = text.partition("=") if "=" in text else ("", "", text)
        if spec.startswith("fresh:"):
            k = int(spec.split(":", 1)[1])
            return cls(label or f"fresh-b{k}", "fresh", k, seed, decoding)
        return cls(label or Path(spec.rstrip("/")).name, spec, None, seed, decoding)

    def build(self, target, dtype: torch.dtype):
        if self.source == "fresh":
            torch.manual_seed(self.seed)  # same weights in every dtype (built in fp32, then cast)
            drafter = hf_specdec.BlockDrafter.for_target(target, block_size=self.block_size).eval()
        else:
            drafter = hf_specdec.load_drafter(self.source, dtype=dtype).to(target.device).eval()
        if self.decoding:  # options override the checkpoint's own settings
            drafter.decoding = {**drafter.decoding.to_dict(), **dict(self.decoding)}
        return drafter


def _number(text: str):
    """'8' -> 8, '0.5' -> 0.5, anything else as is."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def resolve_model(name: str) -> str:
    """A folder or Hub id as is; an offline name of `offline_models` built (once) and returned.

    Like any use of `offline_models`, this sets HF_HUB_OFFLINE=1 for the process."""
    from .offline_models import MODELS, ensure_model

    if name in MODELS and not Path(name).exists():
        return str(ensure_model(name))
    return name


def load_causal_lm(path: str, dtype: torch.dtype, device: torch.device):
    """A causal LM in eval mode on `device`, with hf_specdec's fast LM-head layout installed."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    hf_specdec.fix_lm_head_strides(model)
    return model


def model_factory(target_path: str, assistant_path: str | None, drafters: list[DrafterSpec], device: torch.device):
    """dtype name -> freshly loaded `Models` (each pass of the benchmark loads its own)."""

    def make(dtype_name: str) -> Models:
        dtype = getattr(torch, dtype_name)
        target = load_causal_lm(target_path, dtype, device)
        assistant = load_causal_lm(assistant_path, dtype, device) if assistant_path else None
        return Models(target, assistant, {spec.label: spec.build(target, dtype) for spec in drafters})

    return make


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
