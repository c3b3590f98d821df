"""AMD's PARD-1 layout (`AMD-AGI/PARD`, `pard/pard_train.py` and `pard/pard_infer.py`): reading it into a
`PardDrafter` and writing a PARD drafter out in it.

A PARD-1 checkpoint is the base causal LM unchanged (its own `architectures`, `model_type`, weights and
`vocab_size`) with two extra top-level config keys written by the trainer: `pard_token` (the one mask id used at
every depth, an existing embedding row that may be absent from the tokenizer) and `spd_type: "pard"`. Inference
feeds `[..., last real token, pard_token x (K-1)]` with consecutive positions and causal attention and reads K drafts
from the last real token on: exactly how the PARD base drafts. The layout records no block size (the engines take
it from their own settings) and no target; the drafter's target is checked when `generate` first runs.

PARD-2 (`pard2_*` keys, `warp_model.bin`) is a different layout and is not read here: such a folder is refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from ..base_models import resolve_base_model
from ..pard.configuration_pard import PardConfig
from ..pard.modeling_pard import PardDrafter
from ..registry import PublishedFormat, head_of, register_format

PARD_KEYS = ("pard_token", "spd_type")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)
_LM_META = ("architectures", "transformers_version", "_name_or_path", "torch_dtype", "dtype")


def is_pard1_config(config: dict) -> bool:
    """A causal LM's config with a top-level `pard_token` and no PARD-2 keys."""
    return "pard_token" in config and config.get("spd_type", "pard") == "pard"


def pard_config_from_pard1(config: dict) -> PardConfig:
    """Translate a PARD-1 `config.json` dict into a `PardConfig` (the LM's config kept whole as `base_config`)."""
    if any(key.startswith("pard2") for key in config) or config.get("spd_type") == "pard2":
        raise ValueError(
            "this folder is a PARD-2 checkpoint (pard2_* keys, target features through warp_model.bin); hf_specdec "
            "reads PARD-1 folders (pard_token, spd_type 'pard') and does not read PARD-2 yet."
        )
    token, vocab = config["pard_token"], config.get("vocab_size")
    if not isinstance(token, int) or isinstance(token, bool) or token < 0 or (vocab is not None and token >= vocab):
        raise ValueError(f"pard_token must be an embedding row of the LM (0..{vocab}), got {token!r}")
    base = {k: v for k, v in config.items() if k not in PARD_KEYS and k not in _LM_META}
    return PardConfig(base_config=base, mask_token_id=token, target_layer_ids=[0])


def export_pard1(drafter, out_dir: str | Path, tokenizer_from: str | Path | None = None) -> Path:
    """Write a PARD drafter (adapter merged, any head left out) as a PARD-1 folder: the causal LM under its own
    architecture with `pard_token` and `spd_type`, and the tokenizer files of `tokenizer_from` (default: the
    drafter's base model folder) when there are any. `transformers.AutoModelForCausalLM` loads it as a plain LM;
    vLLM, SGLang and TensorRT-LLM read it as a PARD drafter."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty; export into a new folder (old files would mix with the export)")
    if drafter.feature_proj is not None:
        raise ValueError(
            "this PARD drafter injects target features (PARD-2 style); the PARD-1 layout has no place for them"
        )
    lm = drafter.lm
    lm.save_pretrained(out)
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    config.update(pard_token=int(drafter.config.mask_token_id), spd_type="pard")
    config.pop("_name_or_path", None)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    source = Path(tokenizer_from) if tokenizer_from is not None else None
    if source is None and drafter.config.base_model:  # a folder, or an offline model's name
        found = Path(resolve_base_model(drafter.config.base_model))
        source = found if found.is_dir() else None
    for name in TOKENIZER_FILES if source is not None else ():
        if (source / name).is_file():
            shutil.copy2(source / name, out / name)
    return out


def export_and_check_pard1(drafter_path: str | Path, output: str | Path) -> Path:
    """Export the PARD drafter at `drafter_path` (full weights or a LoRA adapter folder, merged) to the new (or empty)
    folder `output` as PARD-1, check that it loads back as the same drafter (the same LM logits), print a one-line
    summary, return `output`. ValueError for a non-empty output, a drafter that is not PARD, a failed round trip."""
    drafter = PardDrafter.from_pretrained(drafter_path)
    if not isinstance(drafter, PardDrafter) or head_of(drafter) is not None:
        raise ValueError(f"{drafter_path} is not a PARD drafter without a head; PARD-1 holds a PARD drafter's LM only")
    out = export_pard1(drafter, output)
    reloaded = PardDrafter.from_pretrained(out, dtype=drafter.dtype)
    probe = torch.arange(3, 19)[None].to(drafter.device)  # (1, 16) any ids
    with torch.no_grad():
        same = torch.equal(drafter.lm(probe).logits, reloaded.lm(probe).logits)
    if not same or reloaded.config.mask_token_id != drafter.config.mask_token_id:
        raise ValueError(f"{out} does not load back as the same drafter; please report this as a bug")
    print(
        f"wrote {out}: PARD-1 layout ({drafter.lm.config.model_type}, pard_token {drafter.config.mask_token_id}); "
        f"transformers loads it as a plain causal LM, hf_specdec.load_drafter as a PARD drafter"
    )
    return out


FORMAT = register_format(
    PublishedFormat(
        name="pard",
        base_model_type=PardConfig.model_type,
        recognises=lambda config: "pard_token" in config,
        to_config=pard_config_from_pard1,
        after_load=lambda model, path, hub: (False, set()),
    )
)

__all__ = ["FORMAT", "export_and_check_pard1", "export_pard1", "is_pard1_config", "pard_config_from_pard1"]
