"""Red Hat speculators' DFlash layout (`speculators_model_type: "dflash"`): reading it into a `BlockDrafter` and
writing a drafter out in it.

Read from `vllm-project/speculators` @ c05b95b: `src/speculators/config.py` (`SpeculatorModelConfig`,
`SpeculatorsConfig`, `VerifierConfig`), `src/speculators/models/dflash/config.py` (`DFlashSpeculatorConfig`: the
keys and their defaults), `src/speculators/models/dflash/core.py` (`DFlashDraftModel`: tensors, what is not saved),
`src/speculators/model.py` (`DraftVocabMixin`: `embed_tokens`, `lm_head`, `t2d`, `d2t`),
`src/speculators/convert/dflash/converter.py` (the z-lab -> speculators converter), `src/speculators/proposals/
greedy.py`, `src/speculators/train/vocab_mapping.py` (`d2t` offsets) and `src/speculators/models/utils.py`
(`flatten_rope_parameters`). The converter was also run at that commit on a tiny z-lab checkpoint (transformers
5.24.0) and its output checked against this module's writer; the layout below is that output, not the docs:

- `config.json`: `speculators_model_type` "dflash", `speculators_version`, `architectures: ["DFlashDraftModel"]`
  (save_pretrained writes the model class name, not the config's default "DFlashSpeculator"), no `model_type`,
  `transformer_layer_config` (the draft layers' Qwen3 config, as `to_diff_dict`), `aux_hidden_state_layer_ids`,
  `mask_token_id`, `block_size` (default 8), `draft_vocab_size` (default 32000), `target_hidden_size` (null),
  `sample_from_anchor` (false), `sliding_window_non_causal` (false), `speculators_config = {algorithm "dflash",
  proposal_methods [{proposal_type "greedy", speculative_tokens block_size - 1, verifier_accept_k 1,
  accept_tolerance 0.0}], default_proposal_method "greedy", verifier {name_or_path, architectures}}`, `dtype`,
  `tie_word_embeddings`, `transformers_version`. (The converter's folder also holds `config.py` and an `auto_map`
  naming it: transformers copies speculators' config module there because of its `_auto_class = ""`; nothing
  reads it (speculators and vLLM dispatch on `speculators_model_type`), so the writer leaves both out.)
- `model.safetensors`: the DFlash backbone under z-lab's names, no prefix (`fc.weight` (H, L*H), `hidden_norm`,
  `layers.N.*`, `norm`), `embed_tokens.weight` (V, H) and `lm_head.weight` (Vd, H) copied from the verifier (frozen
  in training), and with a reduced vocabulary `t2d` (V,) bool and `d2t` (Vd,) int64 offsets (target id = draft id
  + d2t). `verifier_lm_head` and `verifier_norm` are in `_keys_to_ignore_on_save`, so not written (a file that has
  them still loads: they are read as training-only tensors).

Layer ids: `aux_hidden_state_layer_ids` are vLLM's capture points, "the input of layer k" = the output of layer
k - 1, so our 0-based `target_layer_ids` (z-lab's: `hidden_states[l + 1]`) are the aux ids - 1 (the converter adds
1; vLLM's `update_dflash` subtracts it for `dflash_config.target_layer_ids`). The converter drops an id + 1 equal
to the verifier's layer count: speculators feeds that capture point (the last layer's output) to training as
`verifier_last_hidden_states`, never to `fc`, and the converted `fc` would no longer fit. So the writer refuses a
drafter that taps the target's last layer, and the reader refuses aux id 0 (the embeddings: no decoder layer's
output) and, when the verifier's config is in a local folder it names, an aux id equal to its layer count (vLLM's
capture there is the pre-norm state; hf_specdec reads `hidden_states[L]`, which transformers returns after the
final norm).

Refused, with what to do: other speculators algorithms ("dspark" and the rest are not block drafters of this
kind), `sample_from_anchor: true` (drafts from the anchor slot too), and sliding-window draft layers (speculators
trains them on the `sliding_window` context rows before the anchor, causally within the block unless
`sliding_window_non_causal`, `models/dflash/attention.py`; vLLM runs them causally: not the bidirectional window
the block drafter implements).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig, PretrainedConfig, PreTrainedModel, Qwen3Config

from ..block_drafter.configuration_block_drafter import BlockDrafterConfig
from ..registry import PublishedFormat, register_format
from ..target_features import check_drafter_matches_target
from .dflash import check_block_drafter, dflash_state_dict, draft_vocab_from_d2t, write_layout

SPECULATORS_DFLASH = "dflash"
SPECULATORS_ARCHITECTURE = "DFlashDraftModel"
SPECULATORS_VERSION = "0.7.0"  # the last speculators release at c05b95b; informational, no reader checks it
DEFAULT_BLOCK_SIZE = 8  # DFlashSpeculatorConfig.block_size
DEFAULT_DRAFT_VOCAB_SIZE = 32000  # DFlashSpeculatorConfig.draft_vocab_size
VERIFIER_TENSORS = ("embed_tokens.weight", "lm_head.weight", "verifier_lm_head.weight", "verifier_norm.weight")
DFLASH_FAMILY = (SPECULATORS_DFLASH, "dspark")  # recognised; "dspark" (DFlash with more heads) to refuse clearly
_LAYER_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_act",
    "rms_norm_eps",
    "attention_bias",
    "attention_dropout",
    "max_position_embeddings",
)


def is_speculators_config(config: dict) -> bool:
    """A speculators DFlash-family config (other speculators algorithms are left to other readers)."""
    return config.get("speculators_model_type") in DFLASH_FAMILY


def layer_config(config: dict) -> PretrainedConfig:
    """`transformer_layer_config` read as speculators reads it (`DFlashSpeculatorConfig.validate_transformer_config`):
    the class its `model_type` names (Qwen3 without one), so omitted keys take that class's defaults."""
    layer = config.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise ValueError(
            "this speculators config has no `transformer_layer_config` dict (the draft layers' config); "
            "re-save the checkpoint with speculators."
        )
    config_class = type(AutoConfig.for_model(layer["model_type"])) if "model_type" in layer else Qwen3Config
    return config_class(**layer)


def _rope(layer: PretrainedConfig) -> dict:
    """The draft layers' RoPE; nested per-layer-type parameters as speculators flattens them (`flatten_rope_parameters`:
    the "sliding_attention" entry)."""
    rope = dict(getattr(layer, "rope_parameters", None) or {"rope_type": "default"})
    if "sliding_attention" in rope:
        rope = dict(rope["sliding_attention"])
    if "rope_theta" not in rope and getattr(layer, "rope_theta", None) is not None:
        rope["rope_theta"] = layer.rope_theta
    return rope


def verifier_layer_count(name_or_path: str | None) -> int | None:
    """The decoder layer count of the verifier `name_or_path` when it is a local folder with a config.json; None
    otherwise (the layout does not record it, and nothing is downloaded to find out)."""
    if not name_or_path or not (Path(name_or_path) / "config.json").is_file():
        return None
    verifier = json.loads((Path(name_or_path) / "config.json").read_text(encoding="utf-8"))
    return verifier.get("text_config", verifier).get("num_hidden_layers")


def block_drafter_config_from_speculators(config: dict) -> BlockDrafterConfig:
    """Translate a speculators DFlash `config.json` dict into a `BlockDrafterConfig` (see the module docstring)."""
    algorithm = config.get("speculators_model_type")
    if algorithm != SPECULATORS_DFLASH:
        raise ValueError(
            f"this is a speculators {algorithm!r} checkpoint; hf_specdec reads speculators' 'dflash' drafters only "
            "(a block drafter). Serve it with vLLM, or train an hf_specdec drafter for the target."
        )
    if config.get("sample_from_anchor"):
        raise ValueError(
            "this speculators DFlash drafter samples from the anchor slot too (sample_from_anchor: true, block_size "
            "drafts per pass); hf_specdec's block drafter drafts block_size - 1 tokens from the slots after the "
            "anchor, so it does not load it rather than draft from the wrong slots."
        )
    layer = layer_config(config)
    layer_types = list(getattr(layer, "layer_types", None) or ["full_attention"] * layer.num_hidden_layers)
    if any(t != "full_attention" for t in layer_types):
        raise ValueError(
            f"this speculators DFlash drafter has sliding-window layers (layer_types {layer_types}, sliding_window "
            f"{getattr(layer, 'sliding_window', None)}); speculators trains them on the window before the anchor and "
            "vLLM runs them causally, not as hf_specdec's block drafter would, so it is not loaded."
        )
    aux, mask = config.get("aux_hidden_state_layer_ids"), config.get("mask_token_id")
    if not aux or mask is None:
        raise ValueError(
            "this speculators DFlash config lacks `aux_hidden_state_layer_ids` or `mask_token_id`; both are needed "
            "(vLLM requires them too). Add them to its config.json."
        )
    if min(aux) < 1:
        raise ValueError(
            f"aux_hidden_state_layer_ids {aux} capture the embeddings (id 0, the input of layer 0); hf_specdec's "
            "block drafter taps decoder-layer outputs only (aux id k = the output of layer k - 1)."
        )
    verifier = (config.get("speculators_config") or {}).get("verifier") or {}
    name = verifier.get("name_or_path")
    verifier_layers = verifier_layer_count(name)
    if verifier_layers is not None and verifier_layers in aux:
        raise ValueError(
            f"aux_hidden_state_layer_ids {aux} include {verifier_layers}, the layer count of the verifier {name}: "
            "vLLM captures the last layer's output before the final norm there, hf_specdec after it, and "
            "speculators' converter drops that id. Remove it (and its slice of fc.weight) or retrain without it."
        )
    vocab = layer.vocab_size
    draft_vocab = config.get("draft_vocab_size", DEFAULT_DRAFT_VOCAB_SIZE)
    head_dim = getattr(layer, "head_dim", None) or layer.hidden_size // layer.num_attention_heads
    return BlockDrafterConfig(
        **{k: getattr(layer, k) for k in _LAYER_FIELDS},
        head_dim=head_dim,
        rope_parameters=_rope(layer),
        block_size=config.get("block_size", DEFAULT_BLOCK_SIZE),
        mask_token_id=mask,
        target_layer_ids=[k - 1 for k in aux],  # aux id k = the output of layer k - 1 (see the module docstring)
        target_hidden_size=config.get("target_hidden_size") or layer.hidden_size,
        target_num_hidden_layers=verifier_layers,
        target_vocab_size=vocab,
        target_name_or_path=name,
        draft_vocab_size=None if draft_vocab == vocab else draft_vocab,
    )


def restore_after_load(model, path, hub: dict) -> tuple[bool, set[str]]:
    """A reduced vocabulary (`d2t` offsets) restored into `draft_vocab`; the verifier's tensors and the vocabulary
    maps are the layout's own (hf_specdec embeds and scores with the target itself)."""
    restored = model.config.draft_vocab_size is not None
    if restored:
        model.draft_vocab = draft_vocab_from_d2t(path, **hub).to(model.fc.weight.device)
    return restored, {*VERIFIER_TENSORS, "t2d", "d2t"}


def speculators_export_refusal(config: BlockDrafterConfig, target_layers: int) -> str | None:
    """Why a block drafter of this config cannot be written in speculators' DFlash layout for a target of
    `target_layers` decoder layers, or None when it can."""
    if "sliding_attention" in config.layer_types:
        return (
            f"it has sliding-window layers (layer_types {config.layer_types}), which speculators and vLLM run "
            "otherwise (causally within the block); export it as 'native' instead"
        )
    if target_layers - 1 in config.target_layer_ids:
        return (
            f"it taps the target's last layer ({target_layers - 1}, aux id {target_layers}); speculators reserves that "
            "capture point for training targets and its converter drops it, so vLLM would build a narrower fc"
        )
    return None


def speculators_config_dict(
    config: BlockDrafterConfig,
    target_config: PretrainedConfig,
    verifier: dict,
    vocab_size: int,
    dtype: torch.dtype,
) -> dict:
    """The `config.json` speculators writes for this drafter, for the target of `target_config` (`verifier`: its
    `name_or_path` and `architectures`; its embedding table has `vocab_size` rows) and weights of `dtype`."""
    text = target_config.get_text_config()
    layer = Qwen3Config(
        **{k: getattr(config, k) for k in _LAYER_FIELDS},
        head_dim=config.head_dim,
        rope_parameters=dict(config.rope_parameters or {"rope_type": "default"}),
        layer_types=list(config.layer_types),
        vocab_size=vocab_size,
        tie_word_embeddings=False,
        dtype=dtype,  # the converter's nested config carries it (copied from the z-lab config)
        **{k: getattr(text, k, None) for k in ("bos_token_id", "eos_token_id", "pad_token_id")},
    )
    greedy = {"accept_tolerance": 0.0, "proposal_type": "greedy", "speculative_tokens": config.block_size - 1}
    return {
        "architectures": [SPECULATORS_ARCHITECTURE],
        "aux_hidden_state_layer_ids": [i + 1 for i in config.target_layer_ids],
        "block_size": config.block_size,
        "draft_vocab_size": config.draft_vocab_size or vocab_size,
        "dtype": str(dtype).removeprefix("torch."),
        "mask_token_id": config.mask_token_id,
        "sample_from_anchor": False,
        "sliding_window_non_causal": False,
        "speculators_config": {
            "algorithm": SPECULATORS_DFLASH,
            "default_proposal_method": "greedy",
            "proposal_methods": [{**greedy, "verifier_accept_k": 1}],
            "verifier": {"architectures": list(verifier["architectures"]), "name_or_path": verifier["name_or_path"]},
        },
        "speculators_model_type": SPECULATORS_DFLASH,
        "speculators_version": SPECULATORS_VERSION,
        "target_hidden_size": None,  # the converter's value: the target's hidden size is the drafter's
        "tie_word_embeddings": False,
        "transformer_layer_config": layer.to_diff_dict(),
        "transformers_version": transformers.__version__,
    }


def export_speculators(
    drafter,
    out_dir: str | os.PathLike,
    target: PreTrainedModel | None = None,
    verifier_name_or_path: str | None = None,
) -> Path:
    """Write `drafter` to `out_dir` in speculators' DFlash layout, what speculators' converter writes (`config.json`
    + `model.safetensors` with the target's embeddings and LM head rows); speculators'
    `DFlashDraftModel.from_pretrained` loads it (checked at c05b95b). vLLM's speculators reader takes the method, the
    verifier and num_speculative_tokens from it (`vllm/transformers_utils/configs/speculators/`; unverified here:
    vLLM was not run).

    `target` is needed (its embeddings and LM head are part of the layout); `verifier_name_or_path` (default: the
    drafter's recorded target, else the target's own name) is what vLLM loads as the verifier. Only the block
    backbone is written (a DCOCO/DBLAST head warns). Raises ValueError for what the layout cannot hold."""
    check_block_drafter(drafter)
    if target is None:
        raise ValueError(
            "the speculators layout ships the target's embeddings and LM head; pass the target: "
            "export_speculators(drafter, out_dir, target=target)."
        )
    cfg = drafter.config
    check_drafter_matches_target(cfg, target)
    text = target.config.get_text_config()
    reason = speculators_export_refusal(cfg, text.num_hidden_layers)
    if reason is not None:
        raise ValueError(f"cannot export this drafter in speculators' DFlash layout: {reason}.")
    name = verifier_name_or_path or cfg.target_name_or_path or getattr(target.config, "_name_or_path", None)
    if not name:
        raise ValueError(
            "the speculators layout names its verifier (vLLM loads it from there); pass "
            "verifier_name_or_path='org/model' (or a folder)."
        )
    tensors = dflash_state_dict(drafter, target)  # backbone (+ d2t, t2d, lm_head rows with a draft vocabulary)
    dtype = tensors["fc.weight"].dtype
    embed = target.get_input_embeddings().weight.detach()  # (V, H)
    tensors["embed_tokens.weight"] = embed.to("cpu", dtype).clone()  # (V, H), own storage (tied heads share it)
    if "lm_head.weight" not in tensors:  # the whole vocabulary: every row of the target's head
        tensors["lm_head.weight"] = target.get_output_embeddings().weight.detach().to("cpu", dtype).clone()  # (V, H)
    architectures = target.config.architectures or [type(target).__name__]  # what VerifierConfig reads
    verifier = {"name_or_path": name, "architectures": architectures}
    config = speculators_config_dict(cfg, target.config, verifier, embed.shape[0], dtype)
    return write_layout(out_dir, config, tensors, sort_keys=True)


FORMAT = register_format(
    PublishedFormat(
        name="speculators",
        base_model_type=BlockDrafterConfig.model_type,
        recognises=is_speculators_config,
        to_config=block_drafter_config_from_speculators,
        after_load=restore_after_load,
    )
)

__all__ = [
    "FORMAT",
    "DFLASH_FAMILY",
    "SPECULATORS_ARCHITECTURE",
    "SPECULATORS_DFLASH",
    "block_drafter_config_from_speculators",
    "export_speculators",
    "is_speculators_config",
    "layer_config",
    "restore_after_load",
    "speculators_config_dict",
    "speculators_export_refusal",
    "verifier_layer_count",
]
