"""A checkpoint in the published z-lab DFlash layout loads into `BlockDrafter` without remote code and gives
the same outputs as that architecture's reference implementation in transformers
(`MuseGlimmerAssistantModel`, the DFlash drafter transformers ships), on a synthetic checkpoint."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoConfig, MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel

from hf_specdec import BlockDrafter
from hf_specdec.models.block_drafter.modeling_block_drafter import DraftContextCache

H, HEADS, KV_HEADS, HEAD_DIM, INTER, LAYERS, TAPS = 64, 4, 2, 16, 96, 2, [1, 3, 5]
ROPE_THETA = 10000.0


def zlab_config() -> dict:
    """The z-lab DFlash config schema (Qwen3 fields + block_size + dflash_config)."""
    return {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "model_type": "qwen3",
        "block_size": 8,
        "dflash_config": {"mask_token_id": 250, "target_layer_ids": TAPS},
        "num_target_layers": 8,
        "num_hidden_layers": LAYERS,
        "hidden_size": H,
        "intermediate_size": INTER,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "rope_theta": ROPE_THETA,
        "rms_norm_eps": 1e-6,
        "vocab_size": 256,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "attention_bias": False,
        "layer_types": ["full_attention"] * LAYERS,
    }


def zlab_weights(seed: int = 0) -> dict[str, torch.Tensor]:
    """Random tensors under the published DFlash weight names."""
    g = torch.Generator().manual_seed(seed)
    shapes = {"fc.weight": (H, len(TAPS) * H), "hidden_norm.weight": (H,), "norm.weight": (H,)}
    for i in range(LAYERS):
        p = f"layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, H),
            p + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, H),
            p + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, H),
            p + "self_attn.o_proj.weight": (H, HEADS * HEAD_DIM),
            p + "self_attn.q_norm.weight": (HEAD_DIM,),
            p + "self_attn.k_norm.weight": (HEAD_DIM,),
            p + "mlp.gate_proj.weight": (INTER, H),
            p + "mlp.up_proj.weight": (INTER, H),
            p + "mlp.down_proj.weight": (H, INTER),
            p + "input_layernorm.weight": (H,),
            p + "post_attention_layernorm.weight": (H,),
        }
    out = {}
    for name, shape in shapes.items():
        base = 1.0 if name.endswith("norm.weight") else 0.0
        out[name] = base + 0.2 * torch.randn(shape, generator=g)  # non-trivial norms too
    return out


@pytest.fixture
def zlab_checkpoint(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(zlab_config()))
    save_file(zlab_weights(), str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    return tmp_path


def reference_model() -> MuseGlimmerAssistantModel:
    cfg = MuseGlimmerAssistantConfig(
        hidden_size=H,
        intermediate_size=INTER,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        layer_types=["full_attention"] * LAYERS,
        target_layer_ids=TAPS,
        block_size=8,
        mask_token_id=250,
        attn_implementation="eager",
    )
    model = MuseGlimmerAssistantModel(cfg).eval()
    renamed = {
        {"fc.weight": "encoder.fc.weight", "hidden_norm.weight": "encoder.output_norm_enc.weight"}.get(k, k): v
        for k, v in zlab_weights().items()
    }
    missing, unexpected = model.load_state_dict(renamed, strict=False)
    assert not unexpected and not [m for m in missing if "rotary" not in m], (missing, unexpected)
    return model


@pytest.mark.parametrize("load", ["BlockDrafter", "load_drafter", "AutoModel"])
def test_zlab_checkpoint_loads_without_remote_code(zlab_checkpoint, load):
    from transformers import AutoModel

    import hf_specdec

    loader = {"BlockDrafter": BlockDrafter, "load_drafter": hf_specdec, "AutoModel": AutoModel}[load]
    drafter = (loader.load_drafter if load == "load_drafter" else loader.from_pretrained)(zlab_checkpoint)
    assert type(drafter) is BlockDrafter
    assert drafter.config.block_size == 8 and drafter.config.mask_token_id == 250
    assert drafter.config.target_layer_ids == TAPS and drafter.config.target_num_hidden_layers == 8
    assert drafter.config.rope_parameters["rope_theta"] == ROPE_THETA
    expected = zlab_weights()
    state = drafter.state_dict()
    assert set(state) == set(expected)  # nothing missing, nothing extra (no embeddings, no LM head)
    for name, tensor in expected.items():
        assert torch.equal(state[name], tensor), name


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_zlab_checkpoint_matches_the_reference_architecture(zlab_checkpoint, attn):
    drafter = BlockDrafter.from_pretrained(zlab_checkpoint, attn_implementation=attn).eval()
    reference = reference_model()
    g = torch.Generator().manual_seed(1)
    C, S = 11, 8
    noise = torch.randn(1, S, H, generator=g)
    features = torch.randn(1, C, len(TAPS) * H, generator=g)
    positions = torch.arange(C + S)[None]
    with torch.no_grad():
        ours = drafter(noise_embeds=noise, target_features=features, position_ids=positions).last_hidden_state
        ref = reference(noise_embeds=noise, context_hidden_states=features, position_ids=positions).last_hidden_state
    assert ours.shape == (1, S, H)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)


def test_incremental_context_cache_equals_one_pass(zlab_checkpoint):
    """Feeding context in two rounds through the cache equals one pass over all of it."""
    drafter = BlockDrafter.from_pretrained(zlab_checkpoint).eval()
    g = torch.Generator().manual_seed(2)
    features = torch.randn(1, 15, len(TAPS) * H, generator=g)
    noise = torch.randn(1, 8, H, generator=g)
    with torch.no_grad():
        cache = DraftContextCache()
        drafter(noise_embeds=noise, target_features=features[:, :9], position_ids=torch.arange(17)[None], cache=cache)
        step = drafter(
            noise_embeds=noise, target_features=features[:, 9:], position_ids=torch.arange(9, 23)[None], cache=cache
        ).last_hidden_state
        whole = drafter(noise_embeds=noise, target_features=features, position_ids=torch.arange(23)[None])
    assert cache.get_seq_length() == 15
    torch.testing.assert_close(step, whole.last_hidden_state, atol=1e-5, rtol=1e-5)


def test_zlab_config_without_mask_token_is_refused(tmp_path):
    cfg = zlab_config()
    del cfg["dflash_config"]["mask_token_id"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    save_file(zlab_weights(), str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="mask_token_id"):
        BlockDrafter.from_pretrained(tmp_path)


def test_converted_checkpoint_round_trips_through_automodel(zlab_checkpoint, tmp_path):
    from transformers import AutoModel

    drafter = BlockDrafter.from_pretrained(zlab_checkpoint)
    out = tmp_path / "ours"
    drafter.save_pretrained(out)
    assert AutoConfig.from_pretrained(out).model_type == "hf_specdec_block_drafter"
    again = AutoModel.from_pretrained(out)
    assert type(again) is BlockDrafter
    for (n1, t1), (n2, t2) in zip(drafter.state_dict().items(), again.state_dict().items(), strict=True):
        assert n1 == n2 and torch.equal(t1, t2)


def write_zlab(folder, config: dict, taps: int = len(TAPS)) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    weights = zlab_weights() | {"fc.weight": 0.2 * torch.randn(H, taps * H, generator=torch.Generator().manual_seed(1))}
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})


def test_the_newer_zlab_layout_block_size_inside_dflash_config_loads_as_the_older_one(tmp_path):
    older = zlab_config()
    newer = {k: v for k, v in older.items() if k != "block_size"}
    newer["dflash_config"] = {**older["dflash_config"], "block_size": older["block_size"]}
    write_zlab(tmp_path / "older", older)
    write_zlab(tmp_path / "newer", newer)
    a, b = BlockDrafter.from_pretrained(tmp_path / "older"), BlockDrafter.from_pretrained(tmp_path / "newer")
    same = {k: v for k, v in a.config.to_dict().items() if k != "_name_or_path"}
    assert b.config.block_size == 8 and {k: v for k, v in b.config.to_dict().items() if k != "_name_or_path"} == same
    assert all(torch.equal(a.state_dict()[k], v) for k, v in b.state_dict().items())


def test_a_zlab_config_without_taps_gets_zlabs_default_taps(tmp_path):
    from hf_specdec import build_target_layer_ids

    config = zlab_config()
    config["dflash_config"] = {"mask_token_id": 250}  # z-lab: build_target_layer_ids(num_target_layers, num_layers)
    write_zlab(tmp_path, config, taps=len(build_target_layer_ids(8, LAYERS)))
    drafter = BlockDrafter.from_pretrained(tmp_path)
    assert drafter.config.target_layer_ids == build_target_layer_ids(8, LAYERS)


@pytest.mark.parametrize(
    "change",
    [
        {"layer_types": ["sliding_attention"] * LAYERS},
        {"use_sliding_window": True, "sliding_window": 64},
        {"dflash_config": {**zlab_config()["dflash_config"], "use_swa": True}},  # vLLM's switch (qwen3_dflash.py)
    ],
)
def test_sliding_window_drafter_layers_are_refused_not_read_as_full_attention(tmp_path, change):
    """z-lab's sliding layers have no single meaning (full attention or a flash window in z-lab's code, causal
    within the block in vLLM), so they are not read as the native layout's bidirectional window either."""
    write_zlab(tmp_path, {**zlab_config(), **change})
    with pytest.raises(ValueError, match="sliding-window layers"):
        BlockDrafter.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "change", [{"is_causal": True}, {"dflash_config": {**zlab_config()["dflash_config"], "causal": True}}]
)
def test_causal_block_attention_is_refused(tmp_path, change):
    write_zlab(tmp_path, {**zlab_config(), **change})
    with pytest.raises(ValueError, match="causal attention within the block"):
        BlockDrafter.from_pretrained(tmp_path)
