"""The published DFlash checkpoint layout (z-lab): reading it into a `BlockDrafter` and writing a drafter out in it.

A z-lab DFlash checkpoint is a Qwen3-style `config.json` (`"architectures": ["DFlashDraftModel"]`) with
`block_size`, `num_target_layers` and a `dflash_config` holding `mask_token_id` and `target_layer_ids`, plus
weights named `fc`, `hidden_norm`, `layers.N.self_attn.{q,k,v,o}_proj`, `q_norm`, `k_norm`, `layers.N.mlp.*`
and `norm`. Our `BlockDrafter` uses the same weight names, so only the config needs translating; the weights
load as they are and no remote code runs.

`export_dflash` is the inverse: it writes that config and those weights, which is what the DFlash loaders of the
serving stacks read (checked against vLLM `vllm/model_executor/models/qwen3_dflash.py` @ 036a00d,
`vllm/config/speculative.py` @ 002e77c, `vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py` @ 0cfdd2e, and
SGLang `python/sglang/srt/models/dflash.py` @ 003b23d, `python/sglang/srt/speculative/dflash_utils.py` @ 00731f0):

- vLLM picks its DFlash model from `architectures == ["DFlashDraftModel"]`, reads `dflash_config.mask_token_id`
  and `dflash_config.target_layer_ids` (0-based, "output of layer l"; it adds 1 itself, so the export must not
  write `eagle_aux_hidden_state_layer_ids`, which vLLM reads first and with the other convention), prefixes every
  tensor with `model.` and fuses q/k/v and gate/up itself. SGLang reads the same `dflash_config` fields and
  `block_size`, and ignores tensors it has no parameter for.
- A reduced draft vocabulary (our `draft_vocab`) is written the way vLLM's DFlash loader reads one (EAGLE-3
  style): `draft_vocab_size` in the config, `d2t` (draft id -> target id offset, `target = draft + d2t[draft]`),
  `t2d` (a boolean mask over the target vocabulary; vLLM skips it) and `lm_head.weight`, the target LM-head rows
  the drafter scores (vLLM shares the target's full head only when the checkpoint has none). SGLang ignores
  these tensors and drafts over the full target vocabulary: output is still exact, acceptance may differ.

Not part of the layout, so not exported: decode-time settings (`config.decoding`), the target's identity fields
(`target_model_type`, name, revision) and the heads of DCOCO/DBLAST drafters (only their block backbone is
exported). No `auto_map`/remote code is written: vLLM, SGLang and hf_specdec load the layout natively.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import PreTrainedModel
from transformers.utils import cached_file

from ..block_drafter.configuration_block_drafter import BlockDrafterConfig, build_target_layer_ids
from ..checkpoints import read_config_dict
from ..registry import PublishedFormat, register_format
from ..target_features import check_drafter_matches_target

logger = logging.getLogger(__name__)

DFLASH_ARCHITECTURE = "DFlashDraftModel"

_ARCH_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "rms_norm_eps",
    "attention_bias",
    "max_position_embeddings",
)
_LAYER_TENSORS = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "self_attn.q_norm",
    "self_attn.k_norm",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
    "input_layernorm",
    "post_attention_layernorm",
)
_BIASED = ("q_proj", "k_proj", "v_proj", "o_proj")
_DFLASH_VOCAB_MAPS = ("d2t", "t2d", "lm_head.weight")  # a reduced vocabulary in the DFlash layout (see above)


def is_dflash_config(config: dict) -> bool:
    return isinstance(config.get("dflash_config"), dict)


def block_drafter_config_from_dflash(config: dict) -> BlockDrafterConfig:
    """Translate a z-lab DFlash `config.json` dict into a `BlockDrafterConfig`.

    Both z-lab layouts are read: `block_size` at the top level (Qwen3, LLaMA) or inside `dflash_config` (Qwen3.5 and
    newer; the speculators converter reads both the same way). Without `target_layer_ids`, the taps are z-lab's own
    default (`build_target_layer_ids(num_target_layers, num_hidden_layers)`, `dflash/model.py`).

    Sliding-window drafter layers are refused, never read as full attention or as transformers' bidirectional
    window (which the block drafter implements for the native layout): z-lab's own code gives them no single
    meaning (`dflash/model.py` @ 44947fb passes `sliding_window` to the attention function, which eager and SDPA
    ignore and flash-attention applies as a symmetric window of `sliding_window - 1`), and vLLM runs them causally
    within the block (`vllm/model_executor/models/qwen3_dflash.py` @ 036a00d, `_dflash_layer_causal`). The same
    holds for vLLM's other attention switches in a DFlash config (`dflash_config.use_swa` / `causal`, `is_causal`).
    """
    dflash = config["dflash_config"]
    block_size = dflash.get("block_size", config.get("block_size"))
    taps = dflash.get("target_layer_ids")
    if taps is None and config.get("num_target_layers") and config.get("num_hidden_layers"):
        taps = build_target_layer_ids(config["num_target_layers"], config["num_hidden_layers"])
    missing = [k for k, v in (("mask_token_id", dflash.get("mask_token_id")), ("target_layer_ids", taps)) if v is None]
    if missing or block_size is None:
        raise ValueError(
            f"DFlash config lacks {missing + ([] if block_size is not None else ['block_size'])}: "
            "a DFlash checkpoint needs `block_size` and `dflash_config.{mask_token_id,target_layer_ids}`."
        )
    sliding = [t for t in config.get("layer_types") or () if t != "full_attention"]
    if sliding or (config.get("use_sliding_window") and config.get("sliding_window")) or dflash.get("use_swa"):
        raise ValueError(
            f"this DFlash drafter has sliding-window layers (layer_types {config.get('layer_types')}, sliding_window "
            f"{config.get('sliding_window')}); z-lab's layout gives them no single meaning (their code runs them as "
            "full attention or a flash-attention window, vLLM causally within the block), so hf_specdec does not "
            "load it rather than draft with other attention than it was trained with."
        )
    causal = {k: v for k, v in (("is_causal", config.get("is_causal")), ("causal", dflash.get("causal"))) if v}
    if causal:
        raise ValueError(
            f"this DFlash drafter asks for causal attention within the block ({causal}); hf_specdec's block drafter "
            "attends bidirectionally within the block and does not load it rather than draft with other attention."
        )
    fields = {k: config[k] for k in _ARCH_FIELDS if config.get(k) is not None}
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    rope = {"rope_type": rope.get("rope_type", rope.get("type", "default")), **rope}
    rope.setdefault("rope_theta", config.get("rope_theta", BlockDrafterConfig.default_theta))
    return BlockDrafterConfig(
        **fields,
        rope_parameters=rope,
        block_size=block_size,
        mask_token_id=dflash["mask_token_id"],
        target_layer_ids=list(taps),
        target_num_hidden_layers=config.get("num_target_layers"),
        target_vocab_size=config.get("vocab_size"),
        target_hidden_size=config.get("hidden_size"),
        target_name_or_path=config.get("target_model_name_or_path") or config.get("base_model"),
        draft_vocab_size=config["draft_vocab_size"] if _has_draft_vocab(config) else None,
    )


def _has_draft_vocab(config: dict) -> bool:
    """vLLM reads a missing `draft_vocab_size`, or one equal to `vocab_size`, as the full vocabulary."""
    return config.get("draft_vocab_size") not in (None, config.get("vocab_size"))


def config_from_dflash_checkpoint(path: str | os.PathLike, **hub_kwargs) -> BlockDrafterConfig | None:
    """The translated config if `path` holds a DFlash-layout checkpoint, else None (our own format)."""
    config = read_config_dict(path, **hub_kwargs)
    return block_drafter_config_from_dflash(config) if config is not None and is_dflash_config(config) else None


def restore_after_load(model, path, hub: dict) -> tuple[bool, set[str]]:
    """After the weights of a DFlash checkpoint loaded: its reduced vocabulary (kept as `d2t` offsets) restored into
    `draft_vocab`; (whether it was, the layout's vocabulary maps: read here, no place of the drafter's)."""
    restored = False
    if getattr(model.config, "draft_vocab_size", None) is not None:
        ids = draft_vocab_from_dflash_checkpoint(path, **hub)
        if ids is not None:
            model.draft_vocab = ids.to(model.fc.weight.device)
            restored = True
    return restored, set(_DFLASH_VOCAB_MAPS)


def draft_vocab_from_dflash_checkpoint(path: str | os.PathLike, **hub_kwargs) -> torch.LongTensor | None:
    """(Vd,) target ids of a DFlash checkpoint's reduced vocabulary (from its `d2t`), or None when it has none."""
    config = read_config_dict(path, **hub_kwargs)
    if config is None or not is_dflash_config(config) or not _has_draft_vocab(config):
        return None
    return draft_vocab_from_d2t(path, **hub_kwargs)


def draft_vocab_from_d2t(path: str | os.PathLike, **hub_kwargs) -> torch.LongTensor:
    """(Vd,) target ids of the reduced vocabulary a checkpoint keeps as EAGLE-3 `d2t` offsets (DFlash, speculators);
    ValueError when its single `model.safetensors` has no `d2t`."""
    weights = cached_file(str(path), "model.safetensors", _raise_exceptions_for_missing_entries=False, **hub_kwargs)
    if weights is None:
        raise ValueError(f"{path!s} sets draft_vocab_size but has no single model.safetensors to read `d2t` from.")
    with safe_open(weights, "pt") as f:
        if "d2t" not in f.keys():
            raise ValueError(f"{path!s} sets draft_vocab_size but has no `d2t` tensor mapping draft to target ids.")
        d2t = f.get_tensor("d2t").long()  # (Vd,) offsets: target id = draft id + d2t[draft id]
    return torch.arange(len(d2t)) + d2t


def dflash_weight_names(config: BlockDrafterConfig) -> list[str]:
    """Tensor names of a DFlash checkpoint of this shape, the backbone only (what vLLM and SGLang load)."""
    names = ["fc.weight", "hidden_norm.weight", "norm.weight"]
    for i in range(config.num_hidden_layers):
        for tensor in _LAYER_TENSORS:
            names.append(f"layers.{i}.{tensor}.weight")
            if config.attention_bias and tensor.endswith(_BIASED):
                names.append(f"layers.{i}.{tensor}.bias")
    return names


def dflash_config_from_block_drafter(config: BlockDrafterConfig) -> dict:
    """The z-lab DFlash `config.json` dict of a drafter (inverse of `block_drafter_config_from_dflash`).

    RoPE is written in the legacy `rope_theta`/`rope_scaling` form, which transformers 4.x (the z-lab code, older
    serving stacks) reads as is and transformers 5 converts to `rope_parameters`.
    """
    if config.vocab_size is None:
        raise ValueError("the drafter's config has no vocab_size (the target's); set it before exporting.")
    if "sliding_attention" in config.layer_types:
        raise ValueError(
            f"this drafter has sliding-window layers (layer_types {config.layer_types}); in z-lab's DFlash layout "
            "vLLM runs them causally within the block, another attention than this drafter's. Export it with "
            "format 'native' (transformers' DFlash), which runs them as this drafter does."
        )
    rope = dict(config.rope_parameters or {})
    rope_theta = rope.pop("rope_theta", BlockDrafterConfig.default_theta)
    out = {
        "architectures": [DFLASH_ARCHITECTURE],
        "model_type": "qwen3",
        "block_size": config.block_size,
        "dflash_config": {"mask_token_id": config.mask_token_id, "target_layer_ids": list(config.target_layer_ids)},
        **({"num_target_layers": config.target_num_hidden_layers} if config.target_num_hidden_layers else {}),
        **{k: getattr(config, k) for k in _ARCH_FIELDS},
        "attention_dropout": config.attention_dropout,
        "rope_theta": rope_theta,
        "rope_scaling": None if rope.get("rope_type", "default") == "default" and len(rope) <= 1 else rope,
        "vocab_size": config.vocab_size,
        "tie_word_embeddings": False,
        "layer_types": ["full_attention"] * config.num_hidden_layers,
    }
    if config.draft_vocab_size is not None:
        out["draft_vocab_size"] = config.draft_vocab_size
    return out


def draft_vocab_tensors(draft_vocab: torch.Tensor, vocab_size: int, lm_head_weight: torch.Tensor) -> dict:
    """EAGLE-3-style maps of a reduced vocabulary: `d2t` (Vd,) offsets, `t2d` (V,) mask, `lm_head.weight` (Vd, H)."""
    ids = draft_vocab.long().cpu()  # (Vd,) sorted target ids
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[ids] = True
    return {
        "d2t": ids - torch.arange(len(ids)),
        "t2d": t2d,
        "lm_head.weight": lm_head_weight.detach().index_select(0, ids.to(lm_head_weight.device)).cpu(),
    }


def check_block_drafter(drafter) -> None:
    """TypeError unless `drafter` is a block drafter (the DFlash layouts hold nothing else)."""
    if not isinstance(getattr(drafter, "config", None), BlockDrafterConfig):
        raise TypeError(
            f"only block drafters export to the DFlash layouts, got {type(drafter).__name__}. "
            "Load one with `hf_specdec.load_drafter(path)`."
        )


def dflash_state_dict(drafter, target: PreTrainedModel | None = None) -> dict[str, torch.Tensor]:
    """The drafter's tensors under DFlash names; a drafter with a draft vocabulary needs its `target` (LM head)."""
    check_block_drafter(drafter)
    state = drafter.state_dict()
    names = dflash_weight_names(drafter.config)
    dropped = sorted({k.split(".")[0] for k in state if k not in names and k != "draft_vocab"})
    if dropped:
        logger.warning(
            "exporting only the block backbone of this %s: %s is not part of the DFlash layout, so vLLM and SGLang "
            "will draft with the backbone alone",
            type(drafter).__name__,
            ", ".join(dropped),
        )
    out = {name: state[name].detach().cpu().contiguous() for name in names}
    if drafter.config.draft_vocab_size is not None:
        if target is None:
            raise ValueError(
                "this drafter scores a reduced draft vocabulary; the DFlash layout ships those rows of the target's "
                "LM head (`lm_head.weight`), so pass the target: export_dflash(drafter, out_dir, target=target)."
            )
        check_drafter_matches_target(drafter.config, target)
        maps = draft_vocab_tensors(
            drafter.draft_vocab, drafter.config.vocab_size, target.get_output_embeddings().weight
        )
        maps["lm_head.weight"] = maps["lm_head.weight"].to(out["fc.weight"].dtype)
        out |= maps
    return out


def export_dflash(drafter, out_dir: str | os.PathLike, target: PreTrainedModel | None = None) -> Path:
    """Write `drafter` to `out_dir` in the published DFlash layout (`config.json` + `model.safetensors`).

    The folder is what vLLM (`--speculative-config '{"method": "dflash", "model": out_dir, ...}'`) and SGLang
    (`--speculative-algorithm DFLASH --speculative-draft-model-path out_dir`) load as a DFlash drafter, and what
    `BlockDrafter.from_pretrained` / `hf_specdec.load_drafter` read back into an identical drafter.
    """
    check_block_drafter(drafter)
    config = dflash_config_from_block_drafter(drafter.config)
    tensors = dflash_state_dict(drafter, target)
    config["torch_dtype"] = str(tensors["fc.weight"].dtype).removeprefix("torch.")
    return write_layout(out_dir, config, tensors)


def write_layout(out_dir: str | os.PathLike, config: dict, tensors: dict, sort_keys: bool = False) -> Path:
    """A published block-drafter folder: `config.json` and one `model.safetensors` (every DFlash-family writer)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=sort_keys) + "\n", encoding="utf-8")
    tensors = {name: t.contiguous() for name, t in tensors.items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


FORMAT = register_format(
    PublishedFormat(
        name="dflash",
        base_model_type=BlockDrafterConfig.model_type,
        recognises=is_dflash_config,
        to_config=block_drafter_config_from_dflash,
        after_load=restore_after_load,
    )
)

__all__ = [
    "DFLASH_ARCHITECTURE",
    "FORMAT",
    "block_drafter_config_from_dflash",
    "check_block_drafter",
    "config_from_dflash_checkpoint",
    "dflash_config_from_block_drafter",
    "dflash_state_dict",
    "dflash_weight_names",
    "draft_vocab_from_d2t",
    "draft_vocab_from_dflash_checkpoint",
    "draft_vocab_tensors",
    "export_dflash",
    "is_dflash_config",
    "restore_after_load",
    "write_layout",
]
