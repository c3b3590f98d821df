"""transformers' native DFlash layout (`model_type: "muse_glimmer_assistant"`, models/formats/native_dflash.py): read
into a `BlockDrafter` with the native class's defaults (sliding-window layers included, run exactly as
transformers' `MuseGlimmerAssistantModel` runs them), written so that transformers loads and runs it, refusals."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from conftest import VOCAB, fed_ids, make_drafter, tiny_target
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoModel, MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel
from transformers.cache_utils import DFlashCache
from transformers.models.auto.auto_factory import _BaseAutoModelClass

import hf_specdec
from hf_specdec import BlockDrafter, DecodingSettings, export_drafter, load_drafter
from hf_specdec.models.block_drafter import DraftContextCache
from hf_specdec.models.formats.native_dflash import RENAMED

H, HEADS, KV_HEADS, HEAD_DIM, INTER, LAYERS, TAPS = 64, 4, 2, 16, 96, 2, [0, 2]
NEW_TOKENS = 24
SLIDING = ["sliding_attention", "full_attention"]


def native_weights(hidden: int = H, taps: int = len(TAPS), seed: int = 0) -> dict[str, torch.Tensor]:
    """Random tensors under the native names and shapes (`MuseGlimmerAssistantModel.state_dict()`)."""
    g = torch.Generator().manual_seed(seed)
    shapes = {
        "encoder.fc.weight": (hidden, taps * hidden),  # (H, L*H): the concatenated taps -> H
        "encoder.output_norm_enc.weight": (hidden,),
        "norm.weight": (hidden,),
    }
    for i in range(LAYERS):
        p = f"layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, hidden),
            p + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, hidden),
            p + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, hidden),
            p + "self_attn.o_proj.weight": (hidden, HEADS * HEAD_DIM),
            p + "self_attn.q_norm.weight": (HEAD_DIM,),
            p + "self_attn.k_norm.weight": (HEAD_DIM,),
            p + "mlp.gate_proj.weight": (INTER, hidden),
            p + "mlp.up_proj.weight": (INTER, hidden),
            p + "mlp.down_proj.weight": (hidden, INTER),
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
        }
    out = {}
    for name, shape in shapes.items():
        base = 1.0 if name.endswith("norm.weight") or name.endswith("norm_enc.weight") else 0.0
        out[name] = base + 0.3 * torch.randn(shape, generator=g)
    return out


def native_config(**changes) -> dict:
    """A native config as the class reads it: only the keys that differ from its defaults, plus the trio."""
    config = {
        "model_type": "muse_glimmer_assistant",
        "architectures": ["MuseGlimmerAssistantModel"],
        "hidden_size": H,
        "intermediate_size": INTER,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "block_size": 6,
        "mask_token_id": VOCAB - 1,
        "target_layer_ids": TAPS,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }
    return {k: v for k, v in (config | changes).items() if v is not None}


def write_native(folder, config: dict, weights: dict | None = None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(weights or native_weights(), str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def varied(drafter):
    """Large random weights: a fresh drafter (init std 0.02) drafts nearly one token everywhere."""
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in drafter.parameters():
            if p.dim() == 2:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return drafter


def sliding_drafter(target, block_size: int = 6):
    drafter = varied(make_drafter(target, block_size, num_hidden_layers=LAYERS, layer_types=SLIDING, sliding_window=4))
    drafter.decoding = DecodingSettings(budget="fixed")  # the argmax chain every step, as transformers' loop drafts
    return drafter


def test_omitted_keys_take_the_native_classs_defaults(tmp_path):
    config = native_config(block_size=None, mask_token_id=None, target_layer_ids=None)
    folder = write_native(tmp_path, config, native_weights(taps=5))  # the default taps: [1, 13, 25, 37, 49]
    drafter = load_drafter(folder)
    theirs = MuseGlimmerAssistantConfig.from_pretrained(folder)
    cfg = drafter.config
    assert type(drafter) is BlockDrafter
    assert cfg.layer_types == ["sliding_attention"] * LAYERS == theirs.layer_types and cfg.sliding_window == 2048
    assert cfg.rope_parameters["rope_theta"] == 500000.0 == theirs.rope_parameters["rope_theta"]
    assert (cfg.rms_norm_eps, cfg.block_size, cfg.mask_token_id) == (1e-5, 16, 201818)
    assert cfg.target_layer_ids == [1, 13, 25, 37, 49] and cfg.max_position_embeddings == 131072
    expected = native_weights(taps=5)
    loaded = {RENAMED.get(name, name): t for name, t in drafter.state_dict().items()}
    assert set(loaded) == set(expected) and all(torch.equal(loaded[name], t) for name, t in expected.items())


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_sliding_layers_give_the_hidden_states_of_transformers_class(tmp_path, attn):
    """Round by round through the DFlash cache protocol (as transformers' candidate generator drives it), with a
    window of 4 shorter than the context and than the block: every round's hidden states are transformers'."""
    folder = write_native(tmp_path, native_config(layer_types=SLIDING, sliding_window=4, rope_theta=10000.0))
    ours = load_drafter(folder, attn_implementation=attn).eval()
    theirs = MuseGlimmerAssistantModel.from_pretrained(folder, attn_implementation=attn).eval()
    full_config = copy.deepcopy(ours.config)
    full_config.layer_types = ["full_attention"] * LAYERS
    full = BlockDrafter(full_config).eval()
    full.load_state_dict(ours.state_dict())
    S, g = 6, torch.Generator().manual_seed(1)
    cache, full_cache, their_cache = DraftContextCache(), DraftContextCache(), DFlashCache(config=theirs.config)
    their_cache.activate_past_recording()
    done = 0
    for step, C in enumerate([9, 1, 3, 2]):
        features = torch.randn(1, C, len(TAPS) * H, generator=g)  # (1, C, L*H) new context rows
        noise = torch.randn(1, S, H, generator=g)  # (1, S, H) the block's embeddings
        positions = torch.arange(done, done + C + S)[None]  # (1, C + S)
        their_cache.set_previous_accepted_tokens(C)
        if step:
            their_cache.crop(-S)  # the previous block leaves their cache, as the generator does
        mask = torch.ones(1, done + C + S, dtype=torch.long)
        with torch.no_grad():
            a = ours(noise_embeds=noise, target_features=features, position_ids=positions, cache=cache)
            b = theirs(noise, features, position_ids=positions, attention_mask=mask, cache=their_cache)
            c = full(noise_embeds=noise, target_features=features, position_ids=positions, cache=full_cache)
        done += C
        torch.testing.assert_close(a.last_hidden_state, b.last_hidden_state, atol=1e-5, rtol=1e-5)
    assert (a.last_hidden_state - c.last_hidden_state).abs().max() > 1e-2  # the window changed the states


def test_packed_training_states_equal_the_decode_pass_with_a_window():
    """Training reads a sliding drafter as decoding runs it: `anchor_states` (every anchor's block in one packed
    pass) gives, block by block, the states of one decode pass over that anchor's context."""
    target = tiny_target("qwen3")
    drafter, embed = sliding_drafter(target), target.get_input_embeddings()
    g = torch.Generator().manual_seed(2)
    ids, features = torch.randint(3, 250, (20,), generator=g), torch.randn(20, 2 * H, generator=g)  # (T,), (T, L*H)
    anchors, K = torch.tensor([5, 11, 14]), drafter.config.block_size
    with torch.no_grad():
        packed = drafter.anchor_states(ids, features, anchors, embed)  # (n, K, H)
        for i, a in enumerate(anchors.tolist()):
            block = torch.cat([ids[a : a + 1], torch.full((K - 1,), VOCAB - 1)])  # (K,) anchor + masks
            one = drafter(embed(block)[None], features[None, :a], torch.arange(a + K)[None]).last_hidden_state[0]
            torch.testing.assert_close(packed[i], one, atol=1e-5, rtol=1e-5)


def test_generate_drafts_what_transformers_native_path_drafts(target, prompt, tmp_path):
    """The same folder through transformers' own DFlash path and through hf_specdec: both equal plain greedy and
    feed the target the same drafts, with a sliding window (4) shorter than the prompt (12)."""
    folder = export_drafter(sliding_drafter(target), tmp_path, "native", target=target)
    ours = load_drafter(folder)
    ours.decoding = DecodingSettings(budget="fixed")
    theirs = MuseGlimmerAssistantModel.from_pretrained(folder).eval()
    plain = target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
    native, native_fed = fed_ids(target, prompt, assistant_model=theirs, speculation_type="dflash")
    mine, mine_fed = fed_ids(target, prompt, assistant_model=ours)
    assert torch.equal(native, plain) and torch.equal(mine, plain)
    full = [ids for ids in mine_fed if len(ids) == 6]  # anchor + 5 drafts; the last steps shorten differently
    assert len(full) >= 3 and native_fed[: len(full)] == full
    assert len({tuple(ids[1:]) for ids in full}) > 1  # the drafts vary: an informative comparison


def test_export_is_the_native_layout_and_reads_back_identically(prompt, tmp_path):
    target = tiny_target("qwen3")
    drafter = sliding_drafter(target)
    folder = export_drafter(drafter, tmp_path / "native", "native", target=target)
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "muse_glimmer_assistant" and config["architectures"] == ["MuseGlimmerAssistantModel"]
    assert (config["block_size"], config["mask_token_id"], config["target_layer_ids"]) == (6, VOCAB - 1, [0, 3])
    assert config["layer_types"] == SLIDING and config["sliding_window"] == 4
    assert config["rope_parameters"] == {"rope_type": "default", "rope_theta": 10000.0}
    assert (config["vocab_size"], config["num_target_layers"], config["rms_norm_eps"]) == (VOCAB, 4, 1e-6)
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    assert shapes["encoder.fc.weight"] == (H, 2 * H) and shapes["encoder.output_norm_enc.weight"] == (H,)
    assert not {"fc.weight", "hidden_norm.weight", "draft_vocab"} & set(shapes) and len(shapes) == 3 + 11 * LAYERS
    # transformers' own AutoModel (the original, as in a process that did not import hf_specdec)
    theirs, info = _BaseAutoModelClass.from_pretrained.__func__(AutoModel, folder, output_loading_info=True)
    assert type(theirs) is MuseGlimmerAssistantModel and not info["missing_keys"] and not info["unexpected_keys"]
    again = load_drafter(folder)
    assert all(torch.equal(again.state_dict()[name], t) for name, t in drafter.state_dict().items())
    again.decoding = DecodingSettings(budget="fixed")
    a = target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, assistant_model=drafter)
    b = target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, assistant_model=again)
    assert torch.equal(a, b) and torch.equal(a, target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False))
    again.save_pretrained(tmp_path / "ours")  # our format, under our names (not the layout's it was read from)
    with safe_open(str(tmp_path / "ours" / "model.safetensors"), "pt") as f:
        assert "fc.weight" in f.keys() and "encoder.fc.weight" not in f.keys()
    assert load_drafter(tmp_path / "ours").config.layer_types == SLIDING


def test_automodel_after_import_hf_specdec_reads_it_as_a_block_drafter(prompt, tmp_path):
    """`import hf_specdec` makes AutoModel read published layouts as hf_specdec drafters (models/auto_model.py); one
    read so still runs in generate, with or without `speculation_type="dflash"`."""
    target = tiny_target("llama")
    folder = export_drafter(sliding_drafter(target), tmp_path, "native")
    assistant = AutoModel.from_pretrained(folder)
    assert type(assistant) is BlockDrafter and assistant.config.layer_types == SLIDING
    plain = target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
    for kwargs in ({}, {"speculation_type": "dflash"}):
        out = target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, assistant_model=assistant, **kwargs)
        assert torch.equal(out, plain)


@pytest.mark.parametrize(
    "change, hidden, message",
    [
        ({"vocab_size": 512}, H, "vocab size 512 != target's 256"),
        ({"num_target_layers": 8}, H, "layer count 8 != target's 4"),
        ({"hidden_size": 32, "intermediate_size": INTER}, 32, "hidden size 32 != target's 64"),
    ],
)
def test_a_folder_for_another_target_is_refused_naming_both_sides(tmp_path, prompt, change, hidden, message):
    folder = write_native(
        tmp_path, native_config(**change, layer_types=SLIDING, sliding_window=4), native_weights(hidden)
    )
    drafter = load_drafter(folder)
    with pytest.raises(ValueError, match=message):
        tiny_target("qwen3").generate(prompt, max_new_tokens=4, do_sample=False, assistant_model=drafter)


def test_layer_types_the_block_drafter_does_not_implement_are_refused(tmp_path):
    folder = write_native(tmp_path, native_config(layer_types=["chunked_attention", "full_attention"]))
    with pytest.raises(ValueError, match="chunked_attention"):
        hf_specdec.load_drafter(folder)


def test_export_refuses_what_the_layout_cannot_hold(tmp_path):
    target = tiny_target("qwen3")
    with pytest.raises(ValueError, match="biased attention"):
        export_drafter(make_drafter(target, 4, attention_bias=True), tmp_path / "a", "native")
    reduced = make_drafter(target, 4)
    reduced.set_draft_vocab(torch.arange(3, 200))
    with pytest.raises(ValueError, match="draft vocabulary"):
        export_drafter(reduced, tmp_path / "b", "native")
    with pytest.raises(ValueError, match="format 'native'"):  # z-lab's layout has no place for this window
        export_drafter(sliding_drafter(target), tmp_path / "c", "dflash")
    assert not any(tmp_path.iterdir())
