"""Configuration of the block drafter (DFlash architecture).

The config is saved with the weights. Besides the drafter's own shape it records the identity of the target
the drafter was built for (model type, hidden size, layer count, vocab size and, when known, name and
revision), so that a drafter paired with the wrong target fails with a clear error instead of silently
drafting garbage (see `hf_specdec.models.target_features.check_drafter_matches_target`).
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.modeling_rope_utils import RopeParameters

from ..registry import check_head
from ..settings import DecodingSettings

LAYER_TYPES = ("full_attention", "sliding_attention")


def build_target_layer_ids(num_target_layers: int, num_taps: int) -> list[int]:
    """Target layers whose outputs the drafter reads (DFlash, Chen et al. 2026, `build_target_layer_ids`).

    One tap reads the middle layer; several taps are spread evenly over layers 1 .. L-3.
    """
    if num_target_layers < 1 or num_taps < 1:
        raise ValueError(f"need at least one target layer and one tap, got {num_target_layers=} {num_taps=}")
    if num_taps == 1:
        return [num_target_layers // 2]
    lo, hi = 1, num_target_layers - 3
    if hi <= lo:  # very shallow targets: spread over every layer
        lo, hi = 0, num_target_layers - 1
    ids = [round(lo + i * (hi - lo) / (num_taps - 1)) for i in range(num_taps)]
    return sorted({min(i, num_target_layers - 1) for i in ids})


@strict
class BlockDrafterConfig(PreTrainedConfig):
    r"""Architecture of a parallel block drafter.

    Args:
        hidden_size: width of the drafter; must equal the target's hidden size (embeddings and LM head are shared).
        intermediate_size: MLP width.
        num_hidden_layers: drafter decoder layers (DFlash uses 5 for 4-8B targets; 1 is enough on a CPU).
        num_attention_heads / num_key_value_heads / head_dim: attention shape.
        block_size: tokens per drafting block, anchor included; one drafter pass proposes `block_size - 1` tokens.
        mask_token_id: id filling the block after the anchor. Required: there is no safe default.
        target_layer_ids: 0-based target decoder layers whose outputs are fused into the drafter's keys/values.
        layer_types: "full_attention" (default: every layer) or "sliding_attention" per drafter layer. A sliding layer
            lets a block query at position p attend to the keys (context rows and block slots) at positions k with
            |p - k| <= sliding_window, transformers' bidirectional sliding window (`MuseGlimmerAssistantModel`).
        sliding_window: the window of the sliding layers (required when there is one).
        target_model_type / target_hidden_size / target_num_hidden_layers / target_vocab_size: the target the
            drafter was built for; checked against the target at `generate()` time.
        target_name_or_path / target_revision: where that target came from, when known (informational).
        draft_vocab_size: when set, the drafter scores only this many token ids (EAGLE-3's reduced draft vocabulary,
            stored as the `draft_vocab` buffer) with the matching rows of the target's LM head. Lossless: the target
            still verifies over its full vocabulary; it cuts the drafter's largest cost.
        decoding: decode-time settings saved with the drafter (`hf_specdec.DecodingSettings` as a dict): chain or
            tree, sampled-draft mode, prompt-lookup branches. Read and set them as `drafter.decoding`.
    """

    model_type = "hf_specdec_block_drafter"
    default_theta = 1_000_000.0

    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 1
    num_attention_heads: int = 16
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-6
    attention_bias: bool = False
    attention_dropout: float | int = 0.0
    max_position_embeddings: int = 32768
    rope_parameters: RopeParameters | dict | None = None
    layer_types: list[str] | None = None
    sliding_window: int | None = None
    initializer_range: float = 0.02
    block_size: int = 8
    mask_token_id: int | None = None
    target_layer_ids: list[int] | None = None
    target_model_type: str | None = None
    target_hidden_size: int | None = None
    target_num_hidden_layers: int | None = None
    target_vocab_size: int | None = None
    target_name_or_path: str | None = None
    target_revision: str | None = None
    vocab_size: int | None = None
    draft_vocab_size: int | None = None
    tie_word_embeddings: bool = False
    decoding: dict | None = None
    head: dict | None = None
    backbone: str | None = None

    def __post_init__(self, **kwargs):
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.vocab_size is None:
            # transformers compares assistant and target vocab sizes; report the target's.
            self.vocab_size = self.target_vocab_size
        if self.target_hidden_size is None:
            self.target_hidden_size = self.hidden_size
        if self.layer_types is None:
            self.layer_types = ["full_attention"] * self.num_hidden_layers
        super().__post_init__(**kwargs)
        self.validate_drafter()

    def validate_drafter(self) -> None:
        """Range checks with messages that say what to change."""
        if self.mask_token_id is None:
            raise ValueError(
                "BlockDrafterConfig needs `mask_token_id`: the token that fills the block after the anchor. "
                "Pick an id the target's tokenizer never emits in normal text (e.g. a reserved or FIM pad token)."
            )
        if self.block_size < 2:
            raise ValueError(f"block_size must be >= 2 (anchor + at least one draft), got {self.block_size}")
        if not self.target_layer_ids:
            raise ValueError("target_layer_ids must list at least one target layer (0-based).")
        if min(self.target_layer_ids) < 0:
            raise ValueError(
                f"target_layer_ids {self.target_layer_ids} must be 0-based layer indices >= 0: a negative id would "
                "read a layer counted from the end (the wrong one). Write the layer's index from the first layer."
            )
        if self.mask_token_id < 0:
            raise ValueError(f"mask_token_id must be a token id >= 0, got {self.mask_token_id}.")
        if self.target_num_hidden_layers is not None and max(self.target_layer_ids) >= self.target_num_hidden_layers:
            raise ValueError(
                f"target_layer_ids {self.target_layer_ids} reach past the target's "
                f"{self.target_num_hidden_layers} layers."
            )
        if len(self.layer_types) != self.num_hidden_layers or not set(self.layer_types) <= set(LAYER_TYPES):
            raise ValueError(
                f"layer_types {self.layer_types} must name one of {LAYER_TYPES} for each of the "
                f"{self.num_hidden_layers} drafter layers."
            )
        if "sliding_attention" in self.layer_types and not (self.sliding_window or 0) >= 1:
            raise ValueError(
                f"the drafter has sliding-window layers but sliding_window is {self.sliding_window}; "
                "set it to the window (in positions) the checkpoint was trained with."
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})."
            )
        if self.target_hidden_size != self.hidden_size:
            raise ValueError(
                f"the drafter's hidden_size ({self.hidden_size}) must equal the target's "
                f"({self.target_hidden_size}): it reuses the target's embeddings and LM head."
            )
        if self.draft_vocab_size is not None and not 0 < self.draft_vocab_size <= (self.vocab_size or 2**62):
            raise ValueError(f"draft_vocab_size must be in 1..vocab_size, got {self.draft_vocab_size}")
        if self.vocab_size is not None and self.mask_token_id >= self.vocab_size:
            raise ValueError(f"mask_token_id {self.mask_token_id} is outside the vocabulary ({self.vocab_size}).")
        try:
            DecodingSettings.from_dict(self.decoding)
        except (TypeError, ValueError) as err:
            raise type(err)(f"the drafter's saved decoding settings are invalid: {err}") from err
        check_head(self)

    @classmethod
    def for_target(
        cls,
        target_config: PreTrainedConfig,
        *,
        mask_token_id: int,
        block_size: int = 8,
        num_hidden_layers: int = 1,
        num_target_taps: int | None = None,
        target_name_or_path: str | None = None,
        target_revision: str | None = None,
        **overrides,
    ) -> BlockDrafterConfig:
        """A drafter shaped like the target's own layers (the DFlash recipe), tapping evenly spread layers."""
        text = target_config.get_text_config()
        n_layers = text.num_hidden_layers
        taps = num_target_taps or min(5, max(1, num_hidden_layers if num_hidden_layers > 1 else 3))
        heads = text.num_attention_heads
        fields = dict(
            hidden_size=text.hidden_size,
            intermediate_size=text.intermediate_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=heads,
            num_key_value_heads=getattr(text, "num_key_value_heads", None) or heads,
            head_dim=getattr(text, "head_dim", None) or text.hidden_size // heads,
            hidden_act=getattr(text, "hidden_act", "silu"),
            rms_norm_eps=getattr(text, "rms_norm_eps", 1e-6),
            max_position_embeddings=getattr(text, "max_position_embeddings", 32768),
            rope_parameters=dict(getattr(text, "rope_parameters", None) or {"rope_type": "default"}),
            block_size=block_size,
            mask_token_id=mask_token_id,
            target_layer_ids=build_target_layer_ids(n_layers, taps),
            target_model_type=text.model_type,
            target_hidden_size=text.hidden_size,
            target_num_hidden_layers=n_layers,
            target_vocab_size=text.vocab_size,
            target_name_or_path=target_name_or_path or getattr(target_config, "_name_or_path", None) or None,
            target_revision=target_revision,
        )
        fields.update(overrides)
        return cls(**fields)


__all__ = ["LAYER_TYPES", "BlockDrafterConfig", "build_target_layer_ids"]
