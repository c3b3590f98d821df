"""Configuration of the PARD drafter: a pretrained causal LM of the target's family plus a mask token.

Besides the causal LM's own config (`base_config`, a dict with its `model_type`) it records where the LM came
from (`base_model`: a folder, an hf_specdec offline model name or a Hub id) and the identity of the target, checked
at `generate()` time like every drafter kind's.
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig

from ..block_drafter.configuration_block_drafter import build_target_layer_ids
from ..registry import check_head
from ..settings import check_saved_settings
from .layer_cut import layers_to_keep


@strict
class PardConfig(PreTrainedConfig):
    r"""A parallel drafter adapted from a causal LM (PARD, see docs/pard.md).

    Args:
        base_config: the causal LM's config as a dict (`AutoConfig.for_model(**base_config)` rebuilds it).
        base_model: where the causal LM's weights come from when this folder holds only an adapter: a folder, the
            name of an hf_specdec offline model (`scripts/offline_models.py`) or a Hub id.
        block_size: tokens per drafting block, anchor included: one pass proposes `block_size - 1` drafts (the
            anchor's output gives draft 1, the output at mask i gives draft i + 1).
        mask_token_id: the id fed K-1 times after the anchor; an embedding row text never uses (Qwen2.5: 151665).
        target_layer_ids: target layers whose outputs are tapped from every verify forward, in the order their
            features are concatenated: 0-based, or negative from the end as in Python (-1: the last layer's output,
            post-norm, as HF's `hidden_states[-1]`; AMD PARD-2's `pard2_target_layers` [-1, -8, -16, -24] are
            these ids as they are).
        feature_injection: PARD-2's fusion: token t's input is `embed(token_t) + feature_scale *
            feature_proj(features of token t-1)` (zeros before the first token; mask slots repeat the anchor's). The
            projection starts at zero, so a fresh one drafts exactly as the plain LM does.
        feature_scale: the fixed scale of the projected features (PARD-2's `pard2_scale`; its default 0.02).
        feature_bias: whether the projection has a bias (PARD-2's `pard2_proj_bias`).
        target_model_type / target_hidden_size / target_num_hidden_layers / target_vocab_size / target_name_or_path:
            the target the drafter was built for.
        draft_vocab_size: when set, the drafter's head scores only these many ids (the `draft_vocab` buffer, e.g. the
            most frequent target tokens): the head is a third of a 0.5B model's weights, so this cuts the pass that
            much. Lossless: the target verifies over its whole vocabulary.
        kept_layers: when set, the base LM's decoder layers the drafter runs (increasing ids; then its final norm
            and head): a cheaper pass, trained to make up for the rest (docs/pard.md 5.6). None: all of them.
        decoding: decode-time settings (`hf_specdec.DecodingSettings` as a dict), read and set as `drafter.decoding`.
        head: the head the drafter carries (`{"type": "dblast", ...its shape}`, see `hf_specdec.attach_head`), or None.
        backbone: in a folder that holds a head alone, the PARD drafter it sits on (a folder, relative to this one or
            not, or a Hub id); None otherwise.
    """

    model_type = "hf_specdec_pard"

    base_config: dict | None = None
    base_model: str | None = None
    block_size: int = 8
    mask_token_id: int | None = None
    target_layer_ids: list[int] | None = None
    feature_injection: bool = False
    feature_scale: float = 0.02
    feature_bias: bool = False
    target_model_type: str | None = None
    target_hidden_size: int | None = None
    target_num_hidden_layers: int | None = None
    target_vocab_size: int | None = None
    target_name_or_path: str | None = None
    vocab_size: int | None = None
    hidden_size: int | None = None
    draft_vocab_size: int | None = None
    kept_layers: list[int] | None = None
    tie_word_embeddings: bool = False
    decoding: dict | None = None
    head: dict | None = None
    backbone: str | None = None

    def __post_init__(self, **kwargs):
        if self.base_config is not None:
            self.vocab_size = self.vocab_size or self.base_config.get("vocab_size")
            self.hidden_size = self.hidden_size or self.base_config.get("hidden_size")
        super().__post_init__(**kwargs)
        self.validate_drafter()

    def lm_config(self) -> PreTrainedConfig:
        """The causal LM's config object."""
        values = dict(self.base_config)
        if self.kept_layers is not None:  # the LM as the drafter runs it: the kept layers only
            values["num_hidden_layers"] = len(self.kept_layers)
            if values.get("layer_types") is not None:
                values["layer_types"] = [values["layer_types"][i] for i in self.kept_layers]
        return AutoConfig.for_model(values.pop("model_type"), **values)

    def validate_drafter(self) -> None:
        """Range checks with messages that say what to change."""
        if self.base_config is None or "model_type" not in self.base_config:
            raise ValueError("PardConfig needs `base_config`: the causal LM's config dict, with its model_type.")
        if self.block_size < 2:
            raise ValueError(f"block_size must be >= 2 (anchor + at least one draft), got {self.block_size}")
        if not isinstance(self.mask_token_id, int) or not 0 <= self.mask_token_id < (self.vocab_size or 2**62):
            raise ValueError(
                f"mask_token_id must be an id in 0..{self.vocab_size} (the LM's vocabulary), got {self.mask_token_id}"
            )
        if self.feature_injection and self.target_hidden_size is None:
            raise ValueError("feature_injection needs target_hidden_size: the width of the target features it reads")
        if not self.target_layer_ids or not all(isinstance(i, int) for i in self.target_layer_ids):
            raise ValueError(
                f"target_layer_ids must list target layers (0-based, or negative from the end), got "
                f"{self.target_layer_ids}"
            )
        if len(set(self.target_layer_ids)) != len(self.target_layer_ids):
            raise ValueError(f"target_layer_ids lists a layer twice: {self.target_layer_ids}")
        layers = self.target_num_hidden_layers
        if layers is not None and not all(-layers <= i < layers for i in self.target_layer_ids):
            raise ValueError(f"target_layer_ids {self.target_layer_ids} reach past the target's {layers} layers")
        if not (isinstance(self.feature_scale, (int, float)) and self.feature_scale > 0):
            raise ValueError(f"feature_scale must be a positive number, got {self.feature_scale!r}")
        if self.draft_vocab_size is not None and not 0 < self.draft_vocab_size <= (self.vocab_size or 2**62):
            raise ValueError(f"draft_vocab_size must be in 1..{self.vocab_size}, got {self.draft_vocab_size}")
        if self.target_vocab_size is not None and self.vocab_size is not None:
            if min(self.vocab_size, self.target_vocab_size) <= self.mask_token_id:
                raise ValueError(f"mask_token_id {self.mask_token_id} is outside the target's or the LM's vocabulary")
        if self.kept_layers is not None:
            layers_to_keep(self.kept_layers, self.base_config.get("num_hidden_layers") or 2**31)
        check_saved_settings(self.decoding)
        check_head(self)

    @classmethod
    def for_target(
        cls,
        target_config: PreTrainedConfig,
        lm_config: PreTrainedConfig,
        *,
        mask_token_id: int,
        block_size: int = 8,
        base_model: str | None = None,
        num_target_taps: int = 1,
        feature_injection: bool = False,
        **overrides,
    ) -> PardConfig:
        """A PARD config for `target` over a causal LM with `lm_config` (same tokenizer). The taps default to
        `build_target_layer_ids(layers, num_target_taps)`; pass `target_layer_ids` (e.g. PARD-2's [-1, -8, -16, -24])
        to choose them."""
        text = target_config.get_text_config()
        lm = lm_config.get_text_config()
        if lm.vocab_size < min(text.vocab_size, mask_token_id + 1):
            raise ValueError(
                f"the drafter LM's vocabulary ({lm.vocab_size}) does not cover the target's ({text.vocab_size}); "
                "PARD needs a model of the target's family (same tokenizer)"
            )
        fields = dict(
            base_config=lm.to_dict(),
            base_model=base_model,
            block_size=block_size,
            mask_token_id=mask_token_id,
            target_layer_ids=build_target_layer_ids(text.num_hidden_layers, num_target_taps),
            feature_injection=feature_injection,
            target_model_type=text.model_type,
            target_hidden_size=text.hidden_size,
            target_num_hidden_layers=text.num_hidden_layers,
            target_vocab_size=text.vocab_size,
            target_name_or_path=getattr(target_config, "_name_or_path", None) or None,
        )
        fields.update(overrides)
        return cls(**fields)


__all__ = ["PardConfig"]
