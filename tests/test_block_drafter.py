"""The drafter's config/modeling pair: building for a target, saving, Auto loading, validation, bad files."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import MASK_ID, make_drafter, tiny_target
from transformers import AutoConfig, AutoModel

from hf_specdec import BlockDrafter, BlockDrafterConfig, build_target_layer_ids


def test_target_layer_ids_follow_dflash():
    assert build_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]  # Qwen3-8B drafters
    assert build_target_layer_ids(32, 5) == [1, 8, 15, 22, 29]  # Llama-3.1-8B drafters
    assert build_target_layer_ids(28, 1) == [14]
    assert build_target_layer_ids(4, 3) == [0, 2, 3]  # shallow targets spread over all layers


def test_for_target_records_the_target_identity():
    target = tiny_target("qwen3")
    target.config._name_or_path = "org/tiny-qwen3"
    drafter = make_drafter(target, 6, num_hidden_layers=2)
    cfg = drafter.config
    assert (cfg.target_model_type, cfg.target_hidden_size, cfg.target_num_hidden_layers) == ("qwen3", 64, 4)
    assert cfg.target_vocab_size == cfg.vocab_size == 256 and cfg.target_name_or_path == "org/tiny-qwen3"
    assert cfg.block_size == 6 and cfg.mask_token_id == MASK_ID and cfg.num_hidden_layers == 2
    # no embedding table and no LM head of its own
    names = set(drafter.state_dict())
    assert not any("embed" in n or "lm_head" in n for n in names)
    assert {"fc.weight", "hidden_norm.weight", "norm.weight", "layers.1.self_attn.q_norm.weight"} <= names


def test_save_and_auto_load_round_trip(tmp_path):
    target = tiny_target("llama")
    drafter = make_drafter(target, 4)
    drafter.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "hf_specdec_block_drafter" and saved["mask_token_id"] == MASK_ID
    assert saved["block_size"] == 4 and saved["target_model_type"] == "llama"
    assert isinstance(AutoConfig.from_pretrained(tmp_path), BlockDrafterConfig)
    loaded = AutoModel.from_pretrained(tmp_path)
    assert type(loaded) is BlockDrafter
    for name, tensor in drafter.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    prompt = torch.randint(3, 250, (1, 10))
    a = target.generate(prompt, do_sample=False, max_new_tokens=12, assistant_model=drafter)
    b = target.generate(prompt, do_sample=False, max_new_tokens=12, assistant_model=loaded)
    assert torch.equal(a, b)


def test_config_without_mask_token_is_refused():
    with pytest.raises(ValueError, match="mask_token_id"):
        BlockDrafterConfig(hidden_size=64, num_attention_heads=4, target_layer_ids=[1])


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(block_size=1), "block_size"),
        (dict(target_layer_ids=[]), "target_layer_ids"),
        (dict(target_layer_ids=[9], target_num_hidden_layers=4), "reach past"),
        (dict(num_key_value_heads=3), "multiple"),
        (dict(target_hidden_size=32), "hidden_size"),
        (dict(target_vocab_size=100, mask_token_id=200), "outside the vocabulary"),
    ],
)
def test_bad_configs_say_what_is_wrong(bad, message):
    fields = dict(hidden_size=64, num_attention_heads=4, target_layer_ids=[1], mask_token_id=5) | bad
    with pytest.raises(ValueError, match=message):
        BlockDrafterConfig(**fields)


def test_saved_config_without_mask_token_is_refused_on_load(tmp_path):
    make_drafter(tiny_target("llama"), 4).save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["mask_token_id"] = None
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="mask_token_id"):
        BlockDrafter.from_pretrained(tmp_path)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_checkpoint_gives_a_clear_error(tmp_path, damage):
    make_drafter(tiny_target("llama"), 4).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"\x07" * 64 + data[64:])
    with pytest.raises(ValueError, match="corrupt or truncated"):
        BlockDrafter.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="corrupt or truncated"):
        AutoModel.from_pretrained(tmp_path)


def test_pickle_weights_are_not_loaded(tmp_path):
    drafter = make_drafter(tiny_target("llama"), 4)
    drafter.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    torch.save(drafter.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(OSError, match="safetensors"):
        BlockDrafter.from_pretrained(tmp_path)
