"""Block drafter: the DFlash architecture (Chen, Liang, Liu 2026, "DFlash: Block Diffusion for Flash
Speculative Decoding", arXiv 2602.06036).

A few non-causal decoder layers read a block `[anchor, MASK x (K-1)]` and propose all K-1 draft tokens in one
pass. The target's hidden states from `config.target_layer_ids` are fused (`fc` + `hidden_norm`) and injected as
extra keys/values in every layer ("KV injection"), so the block attends to the whole committed context and to
itself (bidirectionally). The drafter owns no embedding table and no LM head: it embeds with the target's input
embeddings and scores with the target's LM head, so its checkpoint holds only its own layers.

Weight names follow the published z-lab DFlash layout (`fc`, `hidden_norm`, `layers.N.self_attn.{q,k,v,o}_proj`,
`q_norm`, `k_norm`, `mlp`, `norm`), so those checkpoints load without conversion of tensors (the config is
translated by `models/formats/dflash.py`, registered as a published format of this base; `models/formats/` reads
the other DFlash layouts the same way).

Layers attend fully by default; `config.layer_types` may make some "sliding_attention": a block query at position
p then sees only the keys at positions within `config.sliding_window` of p (transformers' bidirectional sliding
window, as its `MuseGlimmerAssistantModel` applies it), context rows and block slots alike.

Shapes: B batch, S block length (anchor included), C new context rows, P = C + S positions, H hidden,
L tapped target layers, h heads, d head dim.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3MLP,
    Qwen3RMSNorm,
    Qwen3RotaryEmbedding,
    eager_attention_forward,
    rotate_half,
)

from ..attach import is_head_folder, load_head_folder
from ..checkpoints import load_checked, read_config_dict
from ..draft_vocab import checked_draft_vocab, vocab_bound
from ..registry import build_head, published_format
from ..settings import SavedDecoding
from .configuration_block_drafter import BlockDrafterConfig
from .packing import block_attention_mask, block_inputs


class DraftContextCache:
    """Projected context keys/values per drafter layer.

    Only committed context rows are kept: the block's own keys/values are used in the pass that makes them
    and never stored, so nothing has to be cropped between drafting rounds. A drafter with sliding-window layers
    also keeps the rows' positions (`positions`, (B, rows)): its window is measured in positions.
    """

    def __init__(self) -> None:
        self.keys: list[torch.Tensor | None] = []
        self.values: list[torch.Tensor | None] = []
        self.positions: torch.Tensor | None = None

    def get_seq_length(self) -> int:
        return 0 if not self.keys or self.keys[0] is None else self.keys[0].shape[-2]

    def extend(self, layer_idx: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new context rows (B, h_kv, C, d); return every cached row of this layer."""
        while len(self.keys) <= layer_idx:
            self.keys.append(None)
            self.values.append(None)
        if self.keys[layer_idx] is not None:
            keys = torch.cat([self.keys[layer_idx], keys], dim=-2)
            values = torch.cat([self.values[layer_idx], values], dim=-2)
        self.keys[layer_idx], self.values[layer_idx] = keys, values
        return keys, values


class BlockDrafterAttention(nn.Module):
    """Attention whose queries come from the block only and whose keys/values are `[context | block]`."""

    def __init__(self, config: BlockDrafterConfig, layer_idx: int) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        self.is_causal = False
        h, h_kv, bias = config.num_attention_heads, config.num_key_value_heads, config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, h * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, h_kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, h_kv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(h * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        context: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        cache: DraftContextCache | None = None,
    ) -> torch.Tensor:
        B, S, _ = hidden_states.shape
        C = context.shape[1]
        kv_input = torch.cat([context, hidden_states], dim=1)  # (B, C + S, H)
        q = self.q_norm(self.q_proj(hidden_states).view(B, S, -1, self.head_dim)).transpose(1, 2)  # (B, h, S, d)
        k = self.k_norm(self.k_proj(kv_input).view(B, C + S, -1, self.head_dim)).transpose(1, 2)  # (B, h_kv, P, d)
        v = self.v_proj(kv_input).view(B, C + S, -1, self.head_dim).transpose(1, 2)  # (B, h_kv, P, d)
        cos, sin = (t.unsqueeze(1) for t in position_embeddings)  # (B, 1, P, d)
        q = q * cos[:, :, -S:] + rotate_half(q) * sin[:, :, -S:]
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            ctx_k, ctx_v = cache.extend(self.layer_idx, k[:, :, :C], v[:, :, :C])
            k = torch.cat([ctx_k, k[:, :, C:]], dim=-2)
            v = torch.cat([ctx_v, v[:, :, C:]], dim=-2)
        attend: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        out, _ = attend(
            self,
            q,
            k,
            v,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            is_causal=False,
        )
        return self.o_proj(out.reshape(B, S, -1))


class BlockDrafterLayer(nn.Module):
    """Pre-norm decoder layer: KV-injection attention, then a gated MLP."""

    def __init__(self, config: BlockDrafterConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = BlockDrafterAttention(config, layer_idx)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, context, position_embeddings, attention_mask=None, cache=None) -> torch.Tensor:
        attn = self.self_attn(self.input_layernorm(hidden_states), context, position_embeddings, attention_mask, cache)
        hidden_states = hidden_states + attn
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class BlockDrafterPreTrainedModel(PreTrainedModel):
    config_class = BlockDrafterConfig
    base_model_prefix = "drafter"
    main_input_name = "noise_embeds"
    _no_split_modules = ["BlockDrafterLayer"]
    _supports_sdpa = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    # The base `_init_weights` covers Linear, RMSNorm and the rotary buffers (which from_pretrained must rebuild).


class BlockDrafter(SavedDecoding, BlockDrafterPreTrainedModel):
    """DFlash-style parallel block drafter.

    Build one for a target with `BlockDrafter.for_target(target, mask_token_id=...)`, load one with
    `from_pretrained` (our format or the published z-lab DFlash layout), and hand it to
    `target.generate(..., assistant_model=drafter)` after `import hf_specdec`.
    """

    def __init__(self, config: BlockDrafterConfig) -> None:
        super().__init__(config)
        n_taps = len(config.target_layer_ids)
        self.fc = nn.Linear(n_taps * config.target_hidden_size, config.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.layers = nn.ModuleList(BlockDrafterLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        vocab = None if config.draft_vocab_size is None else torch.arange(config.draft_vocab_size)  # (Vd,)
        self.register_buffer("draft_vocab", vocab, persistent=True)  # filled from the checkpoint
        self.post_init()
        build_head(self)  # the head `config.head` names, if any (models/attach.py)

    def set_draft_vocab(self, token_ids: torch.LongTensor) -> None:
        """Score only `token_ids` (e.g. the most frequent target tokens); sets `config.draft_vocab_size`. A non-empty
        1-D tensor or list of integer ids inside the target's vocabulary (ValueError otherwise)."""
        ids = checked_draft_vocab(token_ids, vocab_bound(self.config))  # sorted
        self.config.draft_vocab_size = len(ids)
        self.draft_vocab = ids.to(self.fc.weight.device)

    def head_weight(self, lm_head: nn.Module) -> torch.Tensor:
        """(Vd, H) rows of the target's LM head this drafter scores (all rows without a draft vocabulary)."""
        if self.draft_vocab is None:
            return lm_head.weight
        return lm_head.weight.index_select(0, self.draft_vocab.to(lm_head.weight.device))

    def fuse_target_features(self, target_features: torch.Tensor) -> torch.Tensor:
        """(B, C, L*H) concatenated target hidden states -> (B, C, H) context rows."""
        return self.hidden_norm(self.fc(target_features))

    def forward(
        self,
        noise_embeds: torch.Tensor,
        target_features: torch.Tensor,
        position_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        cache: DraftContextCache | None = None,
    ) -> BaseModelOutputWithPast:
        """One drafting pass.

        Args:
            noise_embeds: (B, S, H) target embeddings of `[anchor, MASK, ...]` (or of several packed blocks).
            target_features: (B, C, L*H) target hidden states of context rows not yet in `cache`.
            position_ids: (B, C + S) positions of those context rows followed by the block's positions.
            attention_mask: None for one block at inference (it sees everything); an additive float mask
                (B, 1, S, cached + C + S) for packed training blocks.
            cache: projected context of earlier rows; extended in place with the new rows.
        Returns:
            `last_hidden_state` (B, S, H), normalised; score it with the target's LM head.
        """
        context = self.fuse_target_features(target_features)  # (B, C, H)
        position_embeddings = self.rotary_emb(noise_embeds, position_ids)  # 2 x (B, P, d)
        masks = {"full_attention": attention_mask}
        if "sliding_attention" in self.config.layer_types:
            masks["sliding_attention"] = self.sliding_window_mask(noise_embeds, position_ids, attention_mask, cache)
            if cache is not None:  # the new context rows' positions, for the next pass's window
                new = position_ids[:, : context.shape[1]]
                cache.positions = new if cache.positions is None else torch.cat([cache.positions, new], dim=1)
        hidden = noise_embeds
        for layer, layer_type in zip(self.layers, self.config.layer_types, strict=True):
            hidden = layer(hidden, context, position_embeddings, masks[layer_type], cache)
        return BaseModelOutputWithPast(last_hidden_state=self.norm(hidden))

    def sliding_window_mask(
        self,
        noise_embeds: torch.Tensor,
        position_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None,
        cache: DraftContextCache | None,
    ) -> torch.Tensor:
        """(B, 1, S, cached + C + S) additive mask of the sliding layers: a query at position p sees a key at
        position k iff |p - k| <= sliding_window (and `attention_mask` lets it).

        This is transformers' bidirectional sliding window as `MuseGlimmerAssistantModel` applies it in its DFlash
        loop (`masking_utils.sliding_window_bidirectional_overlay`, with `DFlashCache` offsets that make query and
        key indices the tokens' positions). Built every pass, even when the window covers every key: deciding that
        would read the positions back to the host.
        """
        keys = position_ids  # (B, C + S) positions of the new context rows, then the block
        if cache is not None and cache.get_seq_length():
            if cache.positions is None:
                raise RuntimeError(
                    "this drafter has sliding-window layers, but its context cache holds rows without positions; "
                    "fill the cache through the drafter's forward (it records them)."
                )
            keys = torch.cat([cache.positions.to(keys.device), keys], dim=1)  # (B, cached + C + S)
        queries = position_ids[:, -noise_embeds.shape[1] :]  # (B, S)
        inside = (queries[:, :, None] - keys[:, None, :]).abs() <= self.config.sliding_window  # (B, S, N)
        allowed = attention_mask if attention_mask is not None else noise_embeds.new_zeros(())
        return torch.where(inside[:, None], allowed, torch.finfo(allowed.dtype).min)  # (B, 1, S, N)

    def anchor_states(
        self, ids: torch.LongTensor, features: torch.Tensor, anchors: torch.LongTensor, embed: nn.Module
    ) -> torch.Tensor:
        """(n, K, H) the drafter's states of each anchor's block of one training sequence, all blocks in one packed
        pass (`packing.py`): `ids` (T,) the sequence, `features` (T, L*H) its target features, `anchors` (n,),
        `embed` the target's input embeddings."""
        K, T, device = self.config.block_size, ids.shape[0], self.device
        block_ids, positions = block_inputs(ids, anchors, K, self.config.mask_token_id)  # (n*K,), (T + n*K,)
        noise = embed(block_ids.to(embed.weight.device)).to(device, self.dtype)[None]  # (1, n*K, H)
        hidden = self(
            noise_embeds=noise,
            target_features=features.to(device, self.dtype)[None],  # (1, T, L*H)
            position_ids=positions.to(device)[None],
            attention_mask=block_attention_mask(anchors, T, K, self.dtype).to(device),
        ).last_hidden_state[0]  # (n*K, H)
        return hidden.view(len(anchors), K, -1)

    @classmethod
    def for_target(cls, target: PreTrainedModel, *, mask_token_id: int | None = None, **config_kwargs) -> BlockDrafter:
        """A freshly initialised drafter shaped for `target` (see `BlockDrafterConfig.for_target`).

        `mask_token_id` defaults to a token the target's vocabulary reserves but text rarely contains:
        the tokenizer's pad token when it has one, else the last id of the embedding table.
        """
        if mask_token_id is None:
            mask_token_id = default_mask_token_id(target)
        config = cls.config_class.for_target(target.config, mask_token_id=mask_token_id, **config_kwargs)
        drafter = cls(config)
        return drafter.to(device=target.device, dtype=target.dtype)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """Load our format or a published layout a format module reads into this base (z-lab's DFlash: a config with
        `dflash_config`; transformers' native `muse_glimmer_assistant`; speculators' `dflash`: `models/formats/`),
        without remote code; a folder holding a head alone loads the drafter it names with the head on top."""
        if is_head_folder(pretrained_model_name_or_path):
            return load_head_folder(pretrained_model_name_or_path, kwargs.get("dtype"), kwargs.get("device_map"))
        raw = None
        if isinstance(pretrained_model_name_or_path, (str, os.PathLike)):
            raw = read_config_dict(pretrained_model_name_or_path, **_hub_kwargs(kwargs))
        published = published_format(raw, cls.config_class.model_type)
        if published is not None and kwargs.get("config") is None:
            kwargs["config"] = published.to_config(raw)
        if published is not None and published.key_mapping and "key_mapping" not in kwargs:
            kwargs["key_mapping"] = published.key_mapping  # the layout's tensor names -> ours
        loaded = load_checked(
            super().from_pretrained, pretrained_model_name_or_path, *args, published=published, **kwargs
        )
        if published is not None and published.key_mapping:
            # transformers would save the model back under the layout's names (it reverts a load's key mapping on
            # save_pretrained); it saves in our format, under ours
            (loaded[0] if isinstance(loaded, tuple) else loaded)._weight_conversions = None
        return loaded


def default_mask_token_id(target: PreTrainedModel) -> int:
    """The target's pad token if set, else the last embedding row (often an unused, padded slot)."""
    pad = getattr(target.generation_config, "pad_token_id", None)
    if pad is None:
        pad = getattr(target.config.get_text_config(), "pad_token_id", None)
    if isinstance(pad, int):
        return pad
    return target.get_input_embeddings().weight.shape[0] - 1


def _hub_kwargs(kwargs: dict) -> dict:
    keys = ("revision", "cache_dir", "token", "local_files_only", "subfolder", "force_download")
    return {k: kwargs[k] for k in keys if k in kwargs}


__all__ = ["BlockDrafter", "BlockDrafterPreTrainedModel", "DraftContextCache", "default_mask_token_id"]
