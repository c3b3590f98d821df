"""A PARD drafter over some of its LM's decoder layers (the cheaper draft, docs/pard.md 5.6).

Contracts: a drafter cut to its first layers computes what they compute; with middle layers dropped its cache stays
consistent; its greedy output equals plain greedy; the
cut travels in the config, so full-weight, config-only and adapter folders load cut the same way; a cut past the
LM's layers is refused naming both; a LoRA run with --kept_layers trains on the cut LM and ships an adapter folder
that loads cut."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import MASK_ID, saved_run_inputs
from peft import LoraConfig, get_peft_model
from test_pard import SETTINGS, pard, pard_oracle, tiny_lm
from test_pard_training import _config
from transformers import DynamicCache

import hf_specdec
from hf_specdec import PardConfig, PardDrafter
from hf_specdec.training.config import DistillationConfig
from hf_specdec.training.run import run


def test_a_cut_drafter_computes_the_first_layers_of_its_lm(target, prompt):
    lm = tiny_lm(layers=4)
    full = tiny_lm(layers=4)
    drafter = pard(target, lm=lm)
    drafter.keep_layers(2)
    assert len(drafter.lm.model.layers) == 2 and drafter.config.kept_layers == [0, 1]
    assert drafter.config.base_config["num_hidden_layers"] == 4  # the LM it sits on is still named as it is
    ids = prompt.to(lm.device)
    with torch.no_grad():
        after_two = full.model(ids, output_hidden_states=True).hidden_states[2]  # (1, S, H) layer 2's output
        want = full.model.norm(after_two)  # then the LM's own final norm
        got = drafter(ids).last_hidden_state  # (1, S, H)
    assert torch.allclose(got, want, atol=1e-6)


def test_middle_layers_dropped_keep_the_cache_consistent(target, prompt):
    """Layers 0 and 3 of 4, renumbered for the KV cache: a pass over a cached prefix gives what one pass over the
    whole sequence gives; a second cut picks among the layers the drafter runs, named by the base LM's ids."""
    drafter = pard(target, lm=tiny_lm(layers=4))
    drafter.keep_layers([0, 1, 3])
    drafter.keep_layers([0, 2])
    assert drafter.config.kept_layers == [0, 3] and drafter.lm.config.num_hidden_layers == 2
    ids = prompt.to(drafter.device)
    with torch.no_grad():
        whole = drafter(ids).last_hidden_state[0, -3:]  # (3, H)
        cache = DynamicCache()
        drafter(ids[:, :-3], past_key_values=cache, use_cache=True)
        assert cache.get_seq_length() == ids.shape[1] - 3 and len(cache.layers) == 2
        positions = torch.arange(ids.shape[1] - 3, ids.shape[1], device=ids.device)[None]
        rest = drafter(ids[:, -3:], past_key_values=cache, use_cache=True, position_ids=positions)
    assert torch.allclose(rest.last_hidden_state[0], whole, atol=1e-5)


@pytest.mark.parametrize("corrupt_at", ["own drafts", None, 0, 2])
@pytest.mark.parametrize("name", list(SETTINGS))
def test_greedy_output_of_a_cut_drafter_equals_plain(target, prompt, name, corrupt_at):
    """Its own drafts, and drafts all, none or exactly 2 of which are accepted (the oracle, over the cut drafter)."""
    if corrupt_at == "own drafts":
        drafter = pard(target, lm=tiny_lm(layers=4))
        drafter.keep_layers([0, 2])
    else:  # the oracle's LM has 2 layers
        drafter = pard_oracle(target, prompt, 4, corrupt_at, new_tokens=24)
        drafter.keep_layers([1])
    drafter.decoding = SETTINGS[name]
    plain = target.generate(prompt, max_new_tokens=24, do_sample=False, eos_token_id=None)
    out = target.generate(prompt, max_new_tokens=24, do_sample=False, eos_token_id=None, assistant_model=drafter)
    assert torch.equal(out, plain)


def test_full_weights_config_and_adapter_folders_load_cut(tmp_path, target):
    lm = tiny_lm(layers=4)
    lm.save_pretrained(tmp_path / "base")
    drafter = pard(target, lm=lm, base_model=str(tmp_path / "base"))
    drafter.keep_layers([1, 3])
    drafter.save_pretrained(tmp_path / "full")
    drafter.config.save_pretrained(tmp_path / "config-only")
    peft_model = get_peft_model(drafter, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    peft_model.save_pretrained(tmp_path / "adapter")
    merged = peft_model.merge_and_unload()
    merged.save_adapter_folder(tmp_path / "adapter")
    for folder, want in [("full", merged), ("config-only", None), ("adapter", merged)]:
        loaded = hf_specdec.load_drafter(tmp_path / folder)
        assert isinstance(loaded, PardDrafter) and len(loaded.lm.model.layers) == 2, folder
        assert loaded.lm.config.num_hidden_layers == 2 and loaded.config.kept_layers == [1, 3], folder
        if want is not None and folder != "full":
            for name, tensor in want.state_dict().items():
                assert torch.allclose(loaded.state_dict()[name], tensor), (folder, name)


def test_a_cut_past_the_lm_is_refused_naming_both(tmp_path, target):
    drafter = pard(target, lm=tiny_lm(layers=2))
    with pytest.raises(ValueError, match=r"a count in 1\.\.2"):
        drafter.keep_layers(3)
    for kept in ([0, 2], [1, 0], [], [0, 0]):
        with pytest.raises(ValueError, match=r"kept_layers must be .* in 0\.\.1"):
            PardConfig.for_target(target.config, tiny_lm(layers=2).config, mask_token_id=MASK_ID, kept_layers=kept)
    with pytest.raises(ValueError, match="--kept_layers"):
        DistillationConfig(target="t", output_dir="o", objective="dflash", kept_layers=[2])


def test_a_lora_run_with_kept_layers_trains_the_cut_lm_and_ships_it_cut(tmp_path):
    saved_run_inputs(tmp_path, sequences=4)
    tiny_lm(layers=4).save_pretrained(tmp_path / "lm")
    run(_config(tmp_path, lora_rank=4, lora_alpha=8, num_steps=4, save_every=2, kept_layers=[2]))
    config = json.loads((tmp_path / "run" / "adapter" / "config.json").read_text())
    assert config["kept_layers"] == [0, 1] and config["base_config"]["num_hidden_layers"] == 4
    adapter = json.loads((tmp_path / "run" / "adapter" / "adapter_config.json").read_text())
    drafter = hf_specdec.load_drafter(tmp_path / "run" / "adapter")
    assert len(drafter.lm.model.layers) == 2 and adapter["r"] == 4
    merged = hf_specdec.load_drafter(tmp_path / "run" / "drafter")
    for name, tensor in merged.state_dict().items():
        assert torch.allclose(drafter.state_dict()[name].float(), tensor.float(), atol=1e-2), name


def test_a_cut_drafter_exports_as_pard1_and_loads_back_the_same(tmp_path, target, prompt):
    """The published PARD-1 layout holds the LM as the drafter runs it (the kept layers only)."""
    drafter = pard(target, lm=tiny_lm(layers=4))
    drafter.keep_layers([0, 3])
    folder = hf_specdec.export_drafter(drafter, tmp_path / "pard1", "pard")
    again = hf_specdec.load_drafter(folder)
    assert len(again.lm.model.layers) == 2 and again.config.mask_token_id == MASK_ID
    with torch.no_grad():
        assert torch.equal(again.lm(prompt).logits, drafter.lm(prompt).logits)
