"""The PARD drafter: a causal LM of the target's family that drafts a whole block in one forward with mask tokens.

Input per pass: the committed tokens not yet in the drafter's own KV cache (the last one is the anchor), then
K-1 copies of the mask token; plain causal attention. The output at the anchor is draft 1 (the LM's own next-token
prediction), the output at mask i is draft i + 1. Afterwards the mask entries are cropped from the cache, which
then holds exactly the committed tokens. docs/pard.md has the method and the training recipe.

Saved two ways: full weights (`save_pretrained`, any size) or, for a drafter adapted with LoRA, only the adapter
(`adapter_model.safetensors` + `adapter_config.json`) next to this base's `config.json`, whose `base_model` names
the causal LM; `from_pretrained` then loads the base and merges the adapter. A head on top (`models/attach.py`) can
also be saved alone: its config names the PARD drafter underneath (`backbone`), loaded first.
"""

from __future__ import annotations

import copy
import functools
import inspect
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, PreTrainedModel

from ..attach import HEAD_WEIGHTS, is_head_folder, load_head_folder
from ..base_models import missing_base_hint, resolve_base_model
from ..checkpoints import load_checked, read_config_dict, read_safetensors, readable
from ..draft_vocab import checked_draft_vocab, vocab_bound
from ..int8_weights import Int8Linear, int8_copy, pass_seconds, widest_faster
from ..peft_probe import quiet_peft_probe
from ..registry import build_head, published_format
from ..settings import SavedDecoding
from .configuration_pard import PardConfig
from .folder_checks import check_base_matches, folder_config, read_draft_vocab, refuse_pickled_weights
from .layer_cut import cut_lm_layers, layers_to_keep
from .layout import block_layout, layout_features

ADAPTER_WEIGHTS = "adapter_model.safetensors"
DRAFT_VOCAB = "draft_vocab.safetensors"  # beside an adapter: the ids the head scores
FEATURES = "feature_proj.safetensors"  # beside an adapter that does not hold it: the target-feature projection
WIDE_PASS = 32  # tokens of the wide pass `base_int8_widest` times both ways, beside a one-token pass


class PardDrafter(SavedDecoding, PreTrainedModel):
    """A causal LM plus its mask token (see the module docstring).

    Build one from a same-family model with `PardDrafter.from_causal_lm(lm, target, mask_token_id=...)`, load one
    with `from_pretrained` / `hf_specdec.load_drafter`, and pass it as `assistant_model` after `import hf_specdec`.
    """

    config_class = PardConfig
    base_model_prefix = "pard"
    main_input_name = "input_ids"
    _supports_sdpa = True
    _supports_flex_attn = True

    def __init__(self, config: PardConfig, lm: PreTrainedModel | None = None) -> None:
        super().__init__(config)
        self.lm = lm if lm is not None else AutoModelForCausalLM.from_config(config.lm_config())
        self.feature_proj = None  # PARD-2: tapped target features of token t-1, projected, scaled, added to token t's
        if config.feature_injection:
            taps = len(config.target_layer_ids) * config.target_hidden_size
            self.feature_proj = nn.Linear(taps, config.hidden_size, bias=config.feature_bias)
        vocab = None if config.draft_vocab_size is None else torch.arange(config.draft_vocab_size)  # (Vd,)
        self.register_buffer("draft_vocab", vocab, persistent=True)  # filled from the checkpoint or set_draft_vocab
        self.post_init()
        build_head(self)  # the head `config.head` names, if any (models/attach.py)

    def _init_weights(self, module: nn.Module) -> None:
        # The LM arrives initialised (from_config) or trained (from_pretrained); only the projection is ours.
        if module is self.feature_proj:
            nn.init.zeros_(module.weight)  # a fresh projection leaves the LM's drafts unchanged
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    @property
    def base_lm(self) -> PreTrainedModel | None:
        """The causal LM this drafter was adapted from, with its own weights (no adapter), when kept: what samples
        base-LM chains (`DecodingSettings.sampled_base_drafts`). Not a submodule: never saved, never trained."""
        return self.__dict__.get("_base_lm")

    def attach_base_lm(self, lm: PreTrainedModel) -> None:
        """Keep `lm` (a causal LM of this drafter's tokenizer, e.g. its weights before an adapter) as `base_lm`.
        ValueError when its vocabulary does not cover the drafter's (its drafts would be ids the drafter lacks)."""
        rows, own = lm.get_output_embeddings().weight.shape[0], self.get_output_embeddings().weight.shape[0]
        if rows < own or lm.config.get_text_config().hidden_size != self.config.hidden_size:
            raise ValueError(
                f"the base LM ({rows} vocabulary rows, hidden size {lm.config.get_text_config().hidden_size}) does "
                f"not match this drafter ({own} rows, hidden size {self.config.hidden_size}): it must be the causal "
                "LM the drafter was adapted from"
            )
        self.__dict__["_base_lm"] = lm.eval()

    def _base_weights_key(self, head_weight: torch.Tensor) -> tuple:
        """What `int8_base` and `base_int8_widest` are kept for: the base LM's weights and the head rows."""
        first = next(self.base_lm.parameters())
        return (first.data_ptr(), first.dtype, first.device, head_weight.data_ptr(), head_weight._version)

    def int8_base(self, head_weight: torch.Tensor, head_bias: torch.Tensor | None) -> tuple[nn.Module, nn.Module]:
        """Weight-only int8 copies of `base_lm` (its linear layers; embeddings and norms shared) and of the head rows
        `head_weight` (Vd, H) it scores with (`DecodingSettings.sampled_base_weights`). Built once per weight
        version and kept on the drafter (never saved)."""
        base = self.base_lm
        key = self._base_weights_key(head_weight)
        cached = self.__dict__.get("_int8_base")
        if cached is None or cached[0] != key:
            cached = (key, int8_copy(base), Int8Linear(head_weight, head_bias))
            self.__dict__["_int8_base"] = cached
        return cached[1], cached[2]

    def base_int8_widest(self, head_weight: torch.Tensor, head_bias: torch.Tensor | None) -> float:
        """`sampled_base_weights="auto"`: the widest base-LM pass, in tokens fed, that the int8 copies (`int8_base`)
        run faster than the weights as loaded on this machine (`widest_faster`); 0 where they lose one token. A chain
        feeds one token a pass but its first, which reads what was committed since the last chain (the prompt, on a
        call's first chain). Timed once per weight version (one-token passes both ways, then, only where int8 wins
        there, `WIDE_PASS`-token ones: about two seconds on a 2-core CPU) and kept on the drafter with its seconds
        (`base_weights_seconds`); the copies are dropped if they lose one token. Which weights run changes only how
        often drafts are kept, never the output: q is what the draft was drawn from either way."""
        key = self._base_weights_key(head_weight)
        known = self.__dict__.get("_int8_pays")
        if known is None or known[0] != key:
            quantized, head = self.int8_base(head_weight, head_bias)
            ways = {
                "as_loaded": (self.base_lm.get_decoder(), lambda h: F.linear(h, head_weight, head_bias)),
                "int8": (quantized.get_decoder(), head),
            }
            narrow = pass_seconds(ways)
            # the wide passes only where int8 wins one token: where it loses, no width is run through it (on a
            # 2-core AVX2 EPYC, where it lost, the timing took 11.5 s of a sampled call's first 20, most of it wide)
            wide = pass_seconds(ways, reps=3, width=WIDE_PASS) if narrow["int8"] < narrow["as_loaded"] else {}
            seconds = {**narrow, **{f"{way}@{WIDE_PASS}": s for way, s in wide.items()}}
            known = (key, widest_faster(narrow, wide, WIDE_PASS) if wide else 0, seconds)
            self.__dict__["_int8_pays"] = known
            if known[1] < 1:
                self.__dict__.pop("_int8_base", None)  # the copies lost: their memory goes back
        return known[1]

    @property
    def base_weights_seconds(self) -> dict[str, float] | None:
        """Seconds of a base-LM pass per way as `base_int8_widest` timed them on this machine ("as_loaded", "int8":
        one token; "as_loaded@32", "int8@32": `WIDE_PASS` tokens, timed only where int8 won one token), or None
        before any timing."""
        known = self.__dict__.get("_int8_pays")
        return None if known is None else dict(known[2])

    def add_feature_injection(
        self, target_config, target_layer_ids: list[int], scale: float = 0.02, bias: bool = False
    ) -> None:
        """Read the target's features from now on (PARD-2's fusion, `PardConfig.feature_injection`): a zero
        projection of the listed layers, so the drafter drafts exactly as before until it is trained."""
        if self.feature_proj is not None:
            raise ValueError("this PARD drafter already reads target features")
        text = target_config.get_text_config()
        self.config.feature_injection, self.config.target_layer_ids = True, list(target_layer_ids)
        self.config.feature_scale, self.config.feature_bias = float(scale), bool(bias)
        self.config.target_hidden_size = text.hidden_size
        self.config.target_num_hidden_layers = text.num_hidden_layers
        self.config.validate_drafter()
        weight = self.get_input_embeddings().weight
        proj = nn.Linear(len(target_layer_ids) * text.hidden_size, self.config.hidden_size, bias=bias)
        self.feature_proj = proj.to(device=weight.device, dtype=weight.dtype)
        self._init_weights(self.feature_proj)

    def remove_feature_injection(self) -> None:
        """Read no target features from now on: drop the projection, so the drafter drafts from tokens alone, as
        feature dropout (`feature_dropout` in training) taught it to. ValueError if it reads none."""
        if self.feature_proj is None:
            raise ValueError("this PARD drafter reads no target features: there is no projection to remove")
        self.feature_proj = None
        self.config.feature_injection = False
        self.config.validate_drafter()

    def keep_layers(self, kept: int | list[int]) -> None:
        """Run only some of the LM's decoder layers from now on (then its final norm and head): `kept` increasing
        layer ids, or a count of first layers. A cheaper pass, to be adapted by training (docs/pard.md 5.6). The
        config records the base LM's ids, so a saved adapter folder loads its base LM cut the same way."""
        running = self.config.kept_layers or list(range(self.config.base_config["num_hidden_layers"]))
        ids = layers_to_keep(kept, len(running))  # ids into the layers this drafter runs now
        cut_lm_layers(self.lm, ids)
        self.config.kept_layers = [running[i] for i in ids]
        self.config.validate_drafter()

    def set_draft_vocab(self, token_ids: torch.LongTensor) -> None:
        """Score only `token_ids` with the drafter's head (e.g. the most frequent target tokens): a non-empty 1-D
        tensor or list of integer ids inside the LM's and the target's vocabulary (ValueError otherwise)."""
        ids = checked_draft_vocab(token_ids, vocab_bound(self.config))
        self.config.draft_vocab_size = len(ids)
        self.draft_vocab = ids.to(self.get_output_embeddings().weight.device)

    @property
    def trainable_token_indices(self) -> dict[str, list[int]]:
        """What LoRA training updates besides the adapters (peft `trainable_token_indices`): the mask token's row."""
        return {"embed_tokens": [self.config.mask_token_id]}

    def head_weight(self, lm_head: nn.Module | None = None) -> torch.Tensor:
        """(Vd, H) the rows of the drafter's own LM head it scores (a PARD drafter never scores with the target's)."""
        weight = self.get_output_embeddings().weight
        if self.draft_vocab is None:
            return weight
        if torch.is_grad_enabled():  # training: a fresh selection, part of the graph
            return weight.index_select(0, self.draft_vocab.to(weight.device))
        # decoding: one selection per weight version (a server builds a generator per request)
        key = (weight.data_ptr(), weight._version, weight.device, self.draft_vocab.data_ptr())
        cached = self.__dict__.get("_selected_head")
        if cached is None or cached[0] != key:
            cached = (key, weight.index_select(0, self.draft_vocab.to(weight.device)))
            self.__dict__["_selected_head"] = cached
        return cached[1]

    def get_input_embeddings(self) -> nn.Module:
        return self.lm.get_input_embeddings()

    def get_output_embeddings(self) -> nn.Module:
        return self.lm.get_output_embeddings()

    def input_embeddings(self, input_ids: torch.LongTensor, features: torch.Tensor | None) -> torch.Tensor:
        """(B, S, H) embeddings of `input_ids`, plus the scaled projected features of the previous token when given
        (PARD-2: `embed(token_t) + feature_scale * feature_proj(feat_{t-1})`).

        `features`: (B, S, L*H) target features aligned with `input_ids` (row s = features of the token before
        input s; zeros before the first token; a mask slot gets its anchor's)."""
        embeds = self.lm.get_input_embeddings()(input_ids)  # (B, S, H)
        if self.feature_proj is None or features is None:
            return embeds
        return embeds + self.config.feature_scale * self.feature_proj(features.to(embeds.dtype))

    def forward(
        self,
        input_ids: torch.LongTensor,
        position_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values=None,
        features: torch.Tensor | None = None,
        use_cache: bool = False,
    ):
        """The LM's decoder over (B, S) ids: returns its `BaseModelOutputWithPast` (last_hidden_state (B, S, H));
        score rows with `self.lm.lm_head`."""
        decoder = self.lm.model
        cache_arg = "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"
        return decoder(
            inputs_embeds=self.input_embeddings(input_ids, features),
            position_ids=position_ids,
            attention_mask=attention_mask,
            use_cache=use_cache,
            **{cache_arg: past_key_values},
        )

    @classmethod
    def from_causal_lm(
        cls,
        lm: PreTrainedModel,
        target: PreTrainedModel,
        *,
        mask_token_id: int,
        block_size: int = 8,
        base_model: str | None = None,
        **config_kwargs,
    ) -> PardDrafter:
        """A PARD drafter over `lm` (its weights are used, not copied) for `target`."""
        base_model = base_model or getattr(lm.config, "_name_or_path", None) or None
        config = PardConfig.for_target(
            target.config,
            lm.config,
            mask_token_id=mask_token_id,
            block_size=block_size,
            base_model=base_model,
            **config_kwargs,
        )
        drafter = cls(config, lm=lm)
        return drafter.to(device=lm.device, dtype=lm.dtype)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """Full weights load as usual; a folder with an adapter and no weights loads `base_model` and merges the
        adapter; a folder with only the config loads `base_model` as it is; a folder in a published layout this base
        reads (`models/formats/pard.py`: PARD-1) loads the LM it holds with its mask id."""
        folder = Path(pretrained_model_name_or_path)
        published = published_format(read_config_dict(folder), cls.config_class.model_type) if folder.is_dir() else None
        if published is not None:  # a published layout (AMD's PARD-1/2: the LM as it is, its mask id, a projection)
            config = published.to_config(read_config_dict(folder))
            config.base_model = str(folder)
            drafter = cls.from_base(
                config, dtype=kwargs.get("dtype"), device_map=kwargs.get("device_map"), exact=published
            )
            return drafter
        if folder.is_dir():
            refuse_pickled_weights(folder)
            if (folder / "config.json").is_file() and kwargs.get("config") is None:
                folder_config(cls.config_class, folder)  # a bad config refused naming its file
        if folder.is_dir() and not any(folder.glob("model*.safetensors")):
            if is_head_folder(folder):
                return load_head_folder(folder, dtype=kwargs.get("dtype"), device_map=kwargs.get("device_map"))
            if (folder / ADAPTER_WEIGHTS).is_file():
                return cls.from_adapter_folder(folder, dtype=kwargs.get("dtype"), device_map=kwargs.get("device_map"))
            # a config alone: the base LM as is (an untrained mask token: its first draft is the LM's next token)
            config = folder_config(cls.config_class, folder)
            return cls.from_base(
                config, dtype=kwargs.get("dtype"), device_map=kwargs.get("device_map"), relative_to=folder
            )
        return load_checked(super().from_pretrained, pretrained_model_name_or_path, *args, **kwargs)

    @classmethod
    def from_base(cls, config: PardConfig, dtype=None, device_map=None, relative_to=None, exact=None) -> PardDrafter:
        """A drafter with the weights of `config.base_model` (no adapter). `exact`: the published layout the folder
        is in; its LM must then load whole (no tensor missing or stray, `models/checkpoints.load_checked`) and the
        layout puts its own tensors in place (`PublishedFormat.after_load`)."""
        if not config.base_model:
            raise ValueError("this PARD config names no base_model; load full weights or set config.base_model")
        where = resolve_base_model(config.base_model, relative_to)
        load = functools.partial(AutoModelForCausalLM.from_pretrained, dtype=dtype or "auto", device_map=device_map)
        try:
            with readable(where, "the base LM"):
                lm = load(where) if exact is None else load_checked(load, where, published=_LayoutTensors(exact))
        except OSError as err:
            raise OSError(missing_base_hint(config.base_model)) from err
        check_base_matches(lm, config, where, relative_to)
        if config.kept_layers is not None:  # a drafter over some of the LM's layers (`keep_layers`)
            cut_lm_layers(lm, config.kept_layers)
        drafter = cls(config, lm=lm)
        drafter = drafter.to(device=lm.device, dtype=lm.dtype)
        if exact is not None:
            exact.after_load(drafter, where, {})
        return drafter

    @classmethod
    def from_adapter_folder(
        cls, folder: str | Path, dtype=None, device_map=None, merge: bool = True, keep_base: bool | None = None
    ) -> PardDrafter:
        """Base (`config.base_model`) + the LoRA adapter saved in `folder`, merged; with `merge=False` the base alone
        with the folder's config and draft vocabulary (a run that trains the adapter on loads it on top).
        `keep_base`: also keep the base LM's own weights as `base_lm` (its embeddings shared, its decoder layers a
        copy); None: when the folder's decoding settings draft base-LM chains (`sampled_base_drafts`,
        `greedy_base_drafts`)."""
        from peft import PeftModel

        refuse_pickled_weights(folder)
        config = folder_config(cls.config_class, folder)
        vocab_file = Path(folder) / DRAFT_VOCAB
        draft_vocab = read_draft_vocab(vocab_file, config) if vocab_file.is_file() else None  # before the base loads
        if draft_vocab is None and config.draft_vocab_size is not None:
            raise ValueError(
                f"{folder} sets draft_vocab_size but has no {DRAFT_VOCAB}; save it with save_adapter_folder"
            )
        drafter = cls.from_base(config, dtype=dtype, device_map=device_map, relative_to=folder)
        if keep_base is None:
            chains = drafter.decoding.sampled_base_drafts > 0 or drafter.decoding.greedy_base_drafts > 0
            keep_base = merge and chains and config.kept_layers is None
        base = _weights_copy(drafter.lm) if keep_base else None
        if merge:
            with readable(Path(folder) / ADAPTER_WEIGHTS, "the LoRA adapter"), quiet_peft_probe():
                drafter = PeftModel.from_pretrained(drafter, str(folder)).merge_and_unload()
            drafter.config = config
        if (Path(folder) / FEATURES).is_file():  # an adapter trained on from one without features
            weights = read_safetensors(Path(folder) / FEATURES, "the target-feature projection")
            drafter.feature_proj.load_state_dict({k: v.to(drafter.dtype) for k, v in weights.items()})
        if draft_vocab is not None:
            drafter.draft_vocab = draft_vocab.to(drafter.device)
        if base is not None:
            drafter.attach_base_lm(base)
        return drafter

    @staticmethod
    def is_adapter_folder(path: str | Path) -> bool:
        """Whether `path` is a folder that holds a LoRA adapter and no full weights (loaded as base + adapter)."""
        folder = Path(path)
        return folder.is_dir() and (folder / ADAPTER_WEIGHTS).is_file() and not any(folder.glob("model*.safetensors"))

    def anchor_states(
        self, ids: torch.LongTensor, features: torch.Tensor | None, anchors: torch.LongTensor, embed: nn.Module
    ) -> torch.Tensor:
        """(n, K, H) what a head reads at each anchor's block of one training sequence, as
        `PardCandidateGenerator.block_states` gives it in decoding: the anchor's state (its output) and, for slot
        s = 1..K-1, the output that predicts it (the anchor's for slot 1, mask s-1's after). One packed pass over
        `block_layout` (`ids` (T,) the sequence, `features` (T, L*H) its target features, `anchors` (n,); `embed` is
        unused: the LM embeds with its own table)."""
        K, T, n, device = self.config.block_size, ids.shape[0], len(anchors), self.device
        layout = block_layout(T, anchors, K)
        fed = layout.input_ids(ids, self.config.mask_token_id).to(device)[None]  # (1, N)
        injected = None
        if self.feature_proj is not None:
            injected = layout_features(features, layout).to(device, self.dtype)[None]  # (1, N, L*H)
        hidden = self(
            fed,
            position_ids=layout.slot.to(device)[None],
            attention_mask=layout.additive_mask(device, self.dtype),
            features=injected,
        ).last_hidden_state[0]  # (N, H)
        at_anchor = hidden[anchors.to(device)][:, None]  # (n, 1, H)
        masks = hidden[T:].view(n, K - 2, -1)  # (n, K-2, H) depths 1..K-2
        return torch.cat([at_anchor, at_anchor, masks], dim=1)  # (n, K, H)

    def save_adapter_folder(self, folder: str | Path) -> None:
        """What an adapter folder holds besides peft's adapter files: this kind's config, the draft vocabulary, and
        the feature projection when peft's adapter does not hold it (an adapter trained on from one without)."""
        self.config.save_pretrained(folder)
        if self.draft_vocab is not None:
            save_file({"draft_vocab": self.draft_vocab.cpu().contiguous()}, str(Path(folder) / DRAFT_VOCAB))
        if self.feature_proj is not None and not adapter_holds(folder, "feature_proj"):
            proj = self.feature_proj
            proj = getattr(proj, "modules_to_save", {}).get("default", proj)  # peft's trained copy, if wrapped
            weights = {k: v.detach().cpu().contiguous() for k, v in proj.state_dict().items()}
            save_file(weights, str(Path(folder) / FEATURES))


def _weights_copy(lm: PreTrainedModel) -> PreTrainedModel:
    """A copy of `lm` whose embedding table (and the head tied to it) is `lm`'s own tensor: what an adapter changes
    (decoder layers, and only the mask token's embedding row) is copied, the rest shared."""
    embed = lm.get_input_embeddings().weight
    return copy.deepcopy(lm, memo={id(embed): embed})


def adapter_holds(folder: str | Path, module: str) -> bool:
    """Whether the peft adapter saved in `folder` holds tensors of `module`."""
    from safetensors import safe_open

    path = Path(folder) / ADAPTER_WEIGHTS
    if not path.is_file():
        return False
    with safe_open(str(path), "pt") as f:
        return any(f".{module}." in key for key in f.keys())


class _LayoutTensors:
    """A published layout as `load_checked` sees it while the LM alone loads: the layout's own tensors (a PARD-2
    projection) are not stray; they go in place once the drafter is built."""

    def __init__(self, published) -> None:
        self.published = published

    def after_load(self, lm, path, hub) -> tuple[bool, set[str]]:
        return False, {"target_proj.weight", "target_proj.bias"}


__all__ = ["ADAPTER_WEIGHTS", "DRAFT_VOCAB", "FEATURES", "HEAD_WEIGHTS", "PardDrafter", "adapter_holds"]
