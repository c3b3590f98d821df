"""AMD's PARD-1 and PARD-2 layouts (`AMD-AGI/PARD` @ 6f279bf: `pard/pard_train.py`, `pard/pard_infer.py`,
`pard/pard2_train.py`, `pard/pard2_infer.py`): reading them into a `PardDrafter` and writing a PARD drafter out.

A PARD-1 checkpoint is the base causal LM unchanged (its own `architectures`, `model_type`, weights and
`vocab_size`) with two extra top-level config keys written by the trainer: `pard_token` (the one mask id used at
every depth, an existing embedding row that may be absent from the tokenizer) and `spd_type: "pard"`. Inference
feeds `[..., last real token, pard_token x (K-1)]` with consecutive positions and causal attention and reads K drafts
from the last real token on: exactly how the PARD base drafts. The layout records no block size (the engines take
it from their own settings) and no target; the drafter's target is checked when `generate` first runs.

PARD-2 adds target features. `pard2_train.py` (`prepare_pard2_infer_config`) writes `pard2: true`,
`spd_type: "pard2"`, `pard2_scale`, `pard2_proj_bias`, `pard2_target_dim` (target hidden size x layers) and
`pard2_target_layers` (indices into HF `hidden_states`, concatenated in the listed order; -1 is the post-norm last
state), and saves the projection as `warp_model.bin` = `torch.save({"target_proj.weight" (H_draft, dim)[,
"target_proj.bias"]})` beside the LM's weights. `pard2_infer.py` fuses `embed(token_t) + pard2_scale *
target_proj(feat_{t-1})` (a zero row before the first token), repeats the last real token's feature on every mask
slot, and falls back `pard2_scale -> pard_scale -> feat_scale -> 0.02` (never 1.0, which the open vLLM PR's
reader uses). That is `PardConfig.feature_injection` exactly: a negative `pard2_target_layers` entry is a PARD
`target_layer_ids` entry as it is (Python-negative layer ids; `models/target_features.resolve_layer_ids`), a
positive one (index l into `hidden_states`, l >= 1) is layer l - 1.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors import safe_open

from ..base_models import resolve_base_model
from ..pard.configuration_pard import PardConfig
from ..pard.modeling_pard import PardDrafter
from ..registry import PublishedFormat, head_of, register_format

PARD_KEYS = ("pard_token", "spd_type")
PARD2_KEYS = ("pard2", "pard2_scale", "pard2_proj_bias", "pard2_target_dim", "pard2_target_layers")
PARD2_LEGACY_KEYS = ("pard_scale", "feat_scale", "pard_target_dim")  # older names pard2_infer.py still reads
WARP_WEIGHTS = "warp_model.bin"  # the projection, torch.save'd (read with weights_only=True)
PARD2_DEFAULT_SCALE = 0.02  # pard2_infer.py's last fallback
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
    return "pard_token" in config and not is_pard2_config(config)


def is_pard2_config(config: dict) -> bool:
    """What `pard2_infer.py` treats as PARD-2: `pard2` set or `spd_type == "pard2"`."""
    return bool(config.get("pard2")) or config.get("spd_type") == "pard2"


def pard_config_from_amd(config: dict) -> PardConfig:
    """Translate a PARD-1 or PARD-2 `config.json` dict into a `PardConfig` (the LM's config kept whole as
    `base_config`; a PARD-2 folder's projection weights are read by `load_projection`)."""
    token, vocab = config["pard_token"], config.get("vocab_size")
    if not isinstance(token, int) or isinstance(token, bool) or token < 0 or (vocab is not None and token >= vocab):
        raise ValueError(f"pard_token must be an embedding row of the LM (0..{vocab}), got {token!r}")
    dropped = PARD_KEYS + PARD2_KEYS + PARD2_LEGACY_KEYS + _LM_META
    base = {k: v for k, v in config.items() if k not in dropped}
    if not is_pard2_config(config):
        return PardConfig(base_config=base, mask_token_id=token, target_layer_ids=[0])
    layers = layer_ids_from_pard2(config.get("pard2_target_layers"))
    scale = next((config[k] for k in ("pard2_scale", "pard_scale", "feat_scale") if config.get(k) is not None), None)
    dim = config.get("pard2_target_dim", config.get("pard_target_dim", 4096))  # pard2_infer.py's fallbacks
    if not isinstance(dim, int) or dim <= 0 or dim % len(layers):
        raise ValueError(
            f"pard2_target_dim {dim!r} is not the target's hidden size times the {len(layers)} layers in "
            f"pard2_target_layers {config.get('pard2_target_layers')}; the folder's config.json is inconsistent."
        )
    return PardConfig(
        base_config=base,
        mask_token_id=token,
        target_layer_ids=layers,
        feature_injection=True,
        feature_scale=float(PARD2_DEFAULT_SCALE if scale is None else scale),
        feature_bias=bool(config.get("pard2_proj_bias", False)),
        target_hidden_size=dim // len(layers),
    )


def layer_ids_from_pard2(indices) -> list[int]:
    """PARD `target_layer_ids` of `pard2_target_layers` (indices into HF `hidden_states`, order kept): a negative
    index is the same layer id; a positive index l is layer l - 1; 0 (the embeddings) is no layer."""
    if not isinstance(indices, list) or not indices or not all(isinstance(i, int) for i in indices):
        raise ValueError(
            f"a PARD-2 config needs pard2_target_layers, a list of indices into the target's hidden_states; "
            f"got {indices!r}"
        )
    if 0 in indices:
        raise ValueError(
            f"pard2_target_layers {indices} lists 0, the target's embedding output; hf_specdec taps decoder layers "
            "only and does not load this drafter rather than feed it other features."
        )
    return [i if i < 0 else i - 1 for i in indices]


def pard2_layers_from_ids(layer_ids: list[int], num_layers: int | None) -> list[int]:
    """`pard2_target_layers` of PARD `target_layer_ids`: negative, as AMD's configs write them, when the target's
    layer count is known; else positive indices into `hidden_states`, which pard2_infer.py reads the same way."""
    if num_layers is None:
        return [i if i < 0 else i + 1 for i in layer_ids]
    return [(i % num_layers) - num_layers for i in layer_ids]


def load_projection(drafter: PardDrafter, folder: Path) -> None:
    """Put a PARD-2 folder's `target_proj` (from `warp_model.bin`, or from the LM's safetensors where a converter
    left it) into `drafter.feature_proj`; ValueError when it is missing or its shape disagrees with the config."""
    weights = _projection_tensors(folder)
    proj = drafter.feature_proj
    expected = {"target_proj.weight": tuple(proj.weight.shape)}
    if proj.bias is not None:
        expected["target_proj.bias"] = tuple(proj.bias.shape)
    got = {k: tuple(v.shape) for k, v in weights.items()}
    if got != expected:
        raise ValueError(
            f"{folder} holds target_proj tensors {got}, but its config (pard2_target_dim, pard2_proj_bias, the LM's "
            f"hidden size) asks for {expected}; the folder is inconsistent."
        )
    with torch.no_grad():
        proj.weight.copy_(weights["target_proj.weight"])
        if proj.bias is not None:
            proj.bias.copy_(weights["target_proj.bias"])


def _projection_tensors(folder: Path) -> dict[str, torch.Tensor]:
    if (folder / WARP_WEIGHTS).is_file():
        loaded = torch.load(folder / WARP_WEIGHTS, map_location="cpu", weights_only=True)
        if not isinstance(loaded, dict):
            raise ValueError(f"{folder / WARP_WEIGHTS} is not a dict of tensors (target_proj.weight[, .bias])")
        return {k: v for k, v in loaded.items() if k.startswith("target_proj.")}
    found = {}
    for shard in sorted(folder.glob("model*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            found |= {k: f.get_tensor(k) for k in f.keys() if k.startswith("target_proj.")}
    if not found:
        raise ValueError(
            f"{folder} is a PARD-2 drafter but has no {WARP_WEIGHTS} (nor target_proj tensors in its safetensors): "
            "the projection of the target's features is missing. Download the whole repository."
        )
    return found


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
            "this PARD drafter injects target features; the PARD-1 layout has no place for them: export it with "
            "format='pard2'"
        )
    _write_lm(drafter, out, pard_token=int(drafter.config.mask_token_id), spd_type="pard")
    _copy_tokenizer(drafter, out, tokenizer_from)
    return out


def export_pard2(drafter, out_dir: str | Path, tokenizer_from: str | Path | None = None) -> Path:
    """Write a PARD drafter with target features as AMD's PARD-2 folder: the LM as in PARD-1, the `pard2_*` keys
    (the scale always explicit) and `warp_model.bin` with `target_proj.weight` (H_draft, H_target x layers), in
    the listed layer order. `pard2_infer.py` reads it; hf_specdec.load_drafter reads it back identical."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty; export into a new folder (old files would mix with the export)")
    cfg, proj = drafter.config, drafter.feature_proj
    if proj is None:
        raise ValueError("this PARD drafter reads no target features; export it as PARD-1 with format='pard'")
    _write_lm(
        drafter,
        out,
        pard_token=int(cfg.mask_token_id),
        spd_type="pard2",
        pard2=True,
        pard2_scale=float(cfg.feature_scale),
        pard2_proj_bias=proj.bias is not None,
        pard2_target_dim=int(proj.in_features),
        pard2_target_layers=pard2_layers_from_ids(list(cfg.target_layer_ids), cfg.target_num_hidden_layers),
    )
    tensors = {"target_proj.weight": proj.weight.detach().cpu().contiguous()}
    if proj.bias is not None:
        tensors["target_proj.bias"] = proj.bias.detach().cpu().contiguous()
    torch.save(tensors, out / WARP_WEIGHTS)
    _copy_tokenizer(drafter, out, tokenizer_from)
    return out


def _write_lm(drafter, out: Path, **keys) -> None:
    """The drafter's LM saved under its own architecture, `keys` added at the top level of its config."""
    drafter.lm.save_pretrained(out)
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    config.update(keys)
    config.pop("_name_or_path", None)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def _copy_tokenizer(drafter, out: Path, tokenizer_from: str | Path | None) -> None:
    source = Path(tokenizer_from) if tokenizer_from is not None else None
    if source is None and drafter.config.base_model:  # a folder, or an offline model's name
        found = Path(resolve_base_model(drafter.config.base_model))
        source = found if found.is_dir() else None
    for name in TOKENIZER_FILES if source is not None else ():
        if (source / name).is_file():
            shutil.copy2(source / name, out / name)


def export_and_check_pard(drafter_path: str | Path, output: str | Path, format: str = "pard") -> Path:
    """Export the PARD drafter at `drafter_path` (full weights or a LoRA adapter folder, merged) to the new (or empty)
    folder `output` as PARD-1 (`format="pard"`) or PARD-2 (`"pard2"`), check that it loads back as the same drafter
    (the same LM logits, mask id and projection), print a one-line summary, return `output`. ValueError for a
    non-empty output, a drafter that is not PARD, a failed round trip."""
    drafter = PardDrafter.from_pretrained(drafter_path)
    if not isinstance(drafter, PardDrafter) or head_of(drafter) is not None:
        raise ValueError(f"{drafter_path} is not a PARD drafter without a head; PARD folders hold a PARD drafter only")
    out = (export_pard2 if format == "pard2" else export_pard1)(drafter, output)
    reloaded = PardDrafter.from_pretrained(out, dtype=drafter.dtype)
    probe = torch.arange(3, 19)[None].to(drafter.device)  # (1, 16) any ids
    with torch.no_grad():
        same = torch.equal(drafter.lm(probe).logits, reloaded.lm(probe).logits)
    if drafter.feature_proj is not None:
        same = same and torch.equal(drafter.feature_proj.weight, reloaded.feature_proj.weight)
    if not same or reloaded.config.mask_token_id != drafter.config.mask_token_id:
        raise ValueError(f"{out} does not load back as the same drafter; please report this as a bug")
    layout = "PARD-2" if format == "pard2" else "PARD-1"
    print(
        f"wrote {out}: {layout} layout ({drafter.lm.config.model_type}, pard_token {drafter.config.mask_token_id}); "
        f"transformers loads it as a plain causal LM, hf_specdec.load_drafter as a PARD drafter"
    )
    return out


def after_load(model, path, hub: dict) -> tuple[bool, set[str]]:
    """A PARD-2 folder's projection put in place after its LM loaded (PARD-1: nothing to do)."""
    if model.feature_proj is not None:
        load_projection(model, Path(path))
    return False, {"target_proj.weight", "target_proj.bias"}


FORMAT = register_format(
    PublishedFormat(
        name="pard",
        base_model_type=PardConfig.model_type,
        recognises=lambda config: "pard_token" in config,
        to_config=pard_config_from_amd,
        after_load=after_load,
    )
)

__all__ = [
    "FORMAT",
    "WARP_WEIGHTS",
    "export_and_check_pard",
    "export_pard1",
    "export_pard2",
    "is_pard1_config",
    "is_pard2_config",
    "layer_ids_from_pard2",
    "load_projection",
    "pard2_layers_from_ids",
    "pard_config_from_amd",
]
