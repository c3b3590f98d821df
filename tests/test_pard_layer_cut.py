"""A PARD drafter over its LM's first decoder layers (the cheaper draft, docs/pard.md 5.6).

Contracts: the cut drafter computes what the LM's first layers compute; its greedy output equals plain greedy; the
cut travels in the config, so full-weight, config-only and adapter folders load cut the same way; a cut past the
LM's layers is refused naming both; a LoRA run with --kept_layers trains on the cut LM and ships an adapter folder
that loads cut."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import MASK_ID, saved_run_inputs
from peft import LoraConfig, get_peft_model
from test_pard import SETTINGS, pard, tiny_lm
from test_pard_training import _config

import hf_specdec
from hf_specdec import PardConfig, PardDrafter
from hf_specdec.training.config import DistillationConfig
from hf_specdec.training.run import run


def test_a_cut_drafter_computes_the_first_layers_of_its_lm(target, prompt):
    lm = tiny_lm(layers=4)
    full = tiny_lm(layers=4)
    drafter = pard(target, lm=lm)
    drafter.keep_layers(2)
    assert len(drafter.lm.model.layers) == 2 and drafter.config.kept_layers == 2
    assert drafter.config.base_config["num_hidden_layers"] == 4  # the LM it sits on is still named as it is
    ids = prompt.to(lm.device)
    with torch.no_grad():
        after_two = full.model(ids, output_hidden_states=True).hidden_states[2]  # (1, S, H) layer 2's output
        want = full.model.norm(after_two)  # then the LM's own final norm
        got = drafter(ids).last_hidden_state  # (1, S, H)
    assert torch.allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("corrupt_at", [None, 0, 2])
@pytest.mark.parametrize("name", list(SETTINGS))
def test_greedy_output_of_a_cut_drafter_equals_plain(target, prompt, name, corrupt_at):
    drafter = pard(target, lm=tiny_lm(layers=4))
    drafter.keep_layers(1)
    drafter.decoding = SETTINGS[name]
    plain = target.generate(prompt, max_new_tokens=24, do_sample=False, eos_token_id=None)
    out = target.generate(prompt, max_new_tokens=24, do_sample=False, eos_token_id=None, assistant_model=drafter)
    assert torch.equal(out, plain)


def test_full_weights_config_and_adapter_folders_load_cut(tmp_path, target):
    lm = tiny_lm(layers=4)
    lm.save_pretrained(tmp_path / "base")
    drafter = pard(target, lm=lm, base_model=str(tmp_path / "base"))
    drafter.keep_layers(2)
    drafter.save_pretrained(tmp_path / "full")
    drafter.config.save_pretrained(tmp_path / "config-only")
    peft_model = get_peft_model(drafter, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    peft_model.save_pretrained(tmp_path / "adapter")
    merged = peft_model.merge_and_unload()
    merged.save_adapter_folder(tmp_path / "adapter")
    for folder, want in [("full", merged), ("config-only", None), ("adapter", merged)]:
        loaded = hf_specdec.load_drafter(tmp_path / folder)
        assert isinstance(loaded, PardDrafter) and len(loaded.lm.model.layers) == 2, folder
        assert loaded.lm.config.num_hidden_layers == 2 and loaded.config.kept_layers == 2, folder
        if want is not None and folder != "full":
            for name, tensor in want.state_dict().items():
                assert torch.allclose(loaded.state_dict()[name], tensor), (folder, name)


def test_a_cut_past_the_lm_is_refused_naming_both(tmp_path, target):
    drafter = pard(target, lm=tiny_lm(layers=2))
    with pytest.raises(ValueError, match=r"1\.\.2"):
        drafter.keep_layers(3)
    with pytest.raises(ValueError, match=r"kept_layers must be in 1\.\.2"):
        PardConfig.for_target(target.config, tiny_lm(layers=2).config, mask_token_id=MASK_ID, kept_layers=5)
    with pytest.raises(ValueError, match="--kept_layers"):
        DistillationConfig(target="t", output_dir="o", objective="dflash", kept_layers=2)


def test_a_lora_run_with_kept_layers_trains_the_cut_lm_and_ships_it_cut(tmp_path):
    saved_run_inputs(tmp_path, sequences=4)
    tiny_lm(layers=4).save_pretrained(tmp_path / "lm")
    run(_config(tmp_path, lora_rank=4, lora_alpha=8, num_steps=4, save_every=2, kept_layers=2))
    config = json.loads((tmp_path / "run" / "adapter" / "config.json").read_text())
    assert config["kept_layers"] == 2 and config["base_config"]["num_hidden_layers"] == 4
    adapter = json.loads((tmp_path / "run" / "adapter" / "adapter_config.json").read_text())
    drafter = hf_specdec.load_drafter(tmp_path / "run" / "adapter")
    assert len(drafter.lm.model.layers) == 2 and adapter["r"] == 4
    merged = hf_specdec.load_drafter(tmp_path / "run" / "drafter")
    for name, tensor in merged.state_dict().items():
        assert torch.allclose(drafter.state_dict()[name].float(), tensor.float(), atol=1e-2), name
