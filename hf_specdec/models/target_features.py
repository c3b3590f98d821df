"""What a drafter reads from its target: tapped hidden states, and the identity check that pairs them."""

from __future__ import annotations

import logging

import torch
from transformers import PretrainedConfig, PreTrainedModel

logger = logging.getLogger(__name__)


def hidden_state_indices(layer_ids: list[int]) -> list[int]:
    """`output_hidden_states` indices of decoder-layer outputs (index 0 is the embeddings). Ids are resolved
    (`resolve_layer_ids`): 0-based, the last one (L - 1) being the post-norm final state HF returns last."""
    return [i + 1 for i in layer_ids]


def resolve_layer_ids(layer_ids: list[int], num_layers: int) -> list[int]:
    """0-based decoder-layer ids for a target of `num_layers` layers, in the listed order (the order features are
    concatenated in). Negative ids count from the end as Python does: -1 is the last layer's output, which HF's
    `hidden_states[-1]` returns after the final norm; so a negative id equals AMD PARD-2's negative index into
    `hidden_states` (`pard2_target_layers`). ValueError naming both sides when an id is outside the target."""
    outside = [i for i in layer_ids if not -num_layers <= i < num_layers]
    if outside:
        raise ValueError(
            f"the drafter taps target layers {list(layer_ids)}, but the target has {num_layers} layers "
            f"({outside} outside it); load the drafter built for this target."
        )
    return [i % num_layers for i in layer_ids]


def drafter_layer_ids(config: PretrainedConfig, target_config: PretrainedConfig) -> list[int]:
    """The resolved 0-based target layers a drafter's config taps, for `target_config`."""
    return resolve_layer_ids(list(config.target_layer_ids), target_config.get_text_config().num_hidden_layers)


def tapped_features(hidden_states: tuple | None, layer_ids: list[int], rows: int) -> torch.Tensor | None:
    """(B, rows, L*H): outputs of the tapped layers for the first `rows` positions of a target forward; None when
    the drafter taps none (a PARD drafter without target features)."""
    if not layer_ids:
        return None
    return torch.cat([hidden_states[i][:, :rows] for i in hidden_state_indices(layer_ids)], dim=-1)


def check_drafter_matches_target(config: PretrainedConfig, target: PreTrainedModel) -> None:
    """Raise a clear error when a drafter was built for a different target than `target`. A drafter that reads
    only tokens (PARD without target features: its own embeddings, LM head and mask row) fits any target that
    shares its tokenizer, whatever its shape; only the model type is compared, as a warning."""
    text = target.config.get_text_config()
    if getattr(config, "feature_injection", None) is False:
        _warn_other_type(config, text)
        return
    vocab_rows = target.get_input_embeddings().weight.shape[0]
    problems = []
    if config.target_hidden_size is not None and config.target_hidden_size != text.hidden_size:
        problems.append(f"hidden size {config.target_hidden_size} != target's {text.hidden_size}")
    if config.target_num_hidden_layers is not None and config.target_num_hidden_layers != text.num_hidden_layers:
        problems.append(f"layer count {config.target_num_hidden_layers} != target's {text.num_hidden_layers}")
    if not all(-text.num_hidden_layers <= i < text.num_hidden_layers for i in config.target_layer_ids):
        problems.append(f"tapped layers {config.target_layer_ids} reach past the target's {text.num_hidden_layers}")
    if config.target_vocab_size is not None and config.target_vocab_size not in (text.vocab_size, vocab_rows):
        problems.append(f"vocab size {config.target_vocab_size} != target's {text.vocab_size}")
    drafter_vocab = getattr(config, "vocab_size", None)  # a drafter with its own LM head (PARD) scores these ids
    if config.target_vocab_size is None and drafter_vocab is not None and drafter_vocab < text.vocab_size:
        problems.append(f"vocab size {drafter_vocab} (the drafter's own) < target's {text.vocab_size}")
    if config.mask_token_id >= vocab_rows:
        problems.append(f"mask_token_id {config.mask_token_id} is outside the target's {vocab_rows} embeddings")
    if problems:
        built_for = config.target_name_or_path or config.target_model_type or "another model"
        raise ValueError(
            f"this drafter was built for a different target ({built_for}): " + "; ".join(problems) + ". "
            "Load the drafter trained for this target, or build one with `BlockDrafter.for_target(target)`."
        )
    _warn_other_type(config, text)


def _warn_other_type(config: PretrainedConfig, text: PretrainedConfig) -> None:
    if config.target_model_type and config.target_model_type != text.model_type:
        logger.warning(
            "drafter was built for a %r target but is used with %r; output stays exact, acceptance may be low",
            config.target_model_type,
            text.model_type,
        )


__all__ = [
    "check_drafter_matches_target",
    "drafter_layer_ids",
    "hidden_state_indices",
    "resolve_layer_ids",
    "tapped_features",
]
