"""A drafter that would load wrong fails at load time with an error that names the problem.

Checked when a drafter is loaded (and its config built): tap ids and mask id in range, every tensor the drafter
needs present and none it has no place for, the draft vocabulary present and inside the target's vocabulary, LoRA
adapter chains without cycles, and decode-time settings of the right type (also when set later).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import VOCAB, make_drafter, tiny_target
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModel

from hf_specdec import BlockDrafter, BlockDrafterConfig, DecodingSettings, load_drafter

CONFIG = dict(hidden_size=64, num_attention_heads=4, target_layer_ids=[1], mask_token_id=5, target_vocab_size=VOCAB)


@pytest.fixture
def saved(tmp_path):
    """A saved tiny block drafter; returns its folder."""
    make_drafter(tiny_target("llama"), 4).save_pretrained(tmp_path / "drafter")
    return tmp_path / "drafter"


def edit_config(folder, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | changes))


def edit_weights(folder, drop: tuple[str, ...] = (), add: dict | None = None) -> None:
    weights = {k: v for k, v in load_file(str(folder / "model.safetensors")).items() if k not in drop}
    save_file(weights | (add or {}), str(folder / "model.safetensors"), metadata={"format": "pt"})


LOADERS = (BlockDrafter.from_pretrained, load_drafter, AutoModel.from_pretrained)


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(target_layer_ids=[-1]), "target_layer_ids \\[-1\\] must be 0-based layer indices >= 0"),
        (dict(target_layer_ids=[0, -2]), "must be 0-based"),
        (dict(mask_token_id=-1), "mask_token_id must be a token id >= 0"),
    ],
)
def test_negative_tap_or_mask_ids_are_refused(saved, bad, message):
    with pytest.raises(ValueError, match=message):
        BlockDrafterConfig(**CONFIG | bad)
    edit_config(saved, **bad)
    for load in LOADERS:
        with pytest.raises(ValueError, match=message):
            load(saved)


def test_a_checkpoint_missing_a_tensor_is_refused_not_filled_with_random_weights(saved):
    edit_weights(saved, drop=("fc.weight",))
    for load in LOADERS:
        with pytest.raises(ValueError, match="lacks 1 tensor.*fc.weight.*random values"):
            load(saved)


def test_a_checkpoint_with_tensors_the_drafter_has_no_place_for_is_refused(saved):
    edit_weights(saved, add={"corrector.token_proj.weight": torch.zeros(4, 4)})
    with pytest.raises(ValueError, match="no place for: corrector.token_proj.weight.*load_drafter"):
        BlockDrafter.from_pretrained(saved)


def test_loading_info_is_still_returned_when_asked(saved):
    model, info = BlockDrafter.from_pretrained(saved, output_loading_info=True)
    assert isinstance(model, BlockDrafter) and not info["missing_keys"] and not info["unexpected_keys"]


@pytest.fixture
def with_draft_vocab(tmp_path):
    drafter = make_drafter(tiny_target("llama"), 4)
    drafter.set_draft_vocab(torch.arange(3, 67))
    drafter.save_pretrained(tmp_path / "drafter")
    return tmp_path / "drafter"


def test_a_missing_draft_vocabulary_is_refused(with_draft_vocab):
    edit_weights(with_draft_vocab, drop=("draft_vocab",))
    with pytest.raises(ValueError, match="draft_vocab_size=64 but has no `draft_vocab` tensor"):
        load_drafter(with_draft_vocab)


@pytest.mark.parametrize("bad_id, message", [(VOCAB + 40, "outside the target's vocabulary of 256"), (-3, "negative")])
def test_a_draft_vocabulary_outside_the_vocabulary_is_refused(with_draft_vocab, bad_id, message):
    ids = torch.arange(3, 67)
    ids[-1] = bad_id
    edit_weights(with_draft_vocab, add={"draft_vocab": ids})
    with pytest.raises(ValueError, match=f"draft vocabulary .* is unusable: .*{message}"):
        load_drafter(with_draft_vocab)


def test_a_good_draft_vocabulary_loads(with_draft_vocab):
    assert torch.equal(load_drafter(with_draft_vocab).draft_vocab, torch.arange(3, 67))


def save_adapter_over(base_folder, folder) -> None:
    """A LoRA adapter (non-zero) over the drafter saved at `base_folder`, saved to `folder`."""
    model = get_peft_model(BlockDrafter.from_pretrained(base_folder), LoraConfig(r=2, target_modules=["q_proj"]))
    model.peft_config["default"].base_model_name_or_path = str(base_folder)
    model.save_pretrained(folder, safe_serialization=True)


def set_base(adapter, base) -> None:
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(base)
    (adapter / "adapter_config.json").write_text(json.dumps(config))


def test_an_adapter_naming_itself_as_base_is_refused(saved, tmp_path):
    save_adapter_over(saved, tmp_path / "a")
    assert isinstance(load_drafter(tmp_path / "a"), BlockDrafter)  # a good chain loads
    set_base(tmp_path / "a", tmp_path / "a")
    with pytest.raises(ValueError, match="adapter chain loops back on itself .*base_model_name_or_path"):
        load_drafter(tmp_path / "a")


def test_two_adapters_naming_each_other_are_refused(saved, tmp_path):
    save_adapter_over(saved, tmp_path / "a")
    save_adapter_over(saved, tmp_path / "b")
    set_base(tmp_path / "b", tmp_path / "a")
    assert isinstance(load_drafter(tmp_path / "b"), BlockDrafter)  # b over a over the drafter: fine
    set_base(tmp_path / "a", tmp_path / "b")
    with pytest.raises(ValueError, match="loops back on itself"):
        load_drafter(tmp_path / "b")


@pytest.mark.parametrize(
    "field, value, error",
    [
        ("tree_budget", "8", TypeError),
        ("tree_budget", 2.5, TypeError),
        ("tree_topk", True, TypeError),
        ("prompt_lookup_tokens", None, TypeError),
        ("sample_branches", 0, ValueError),
        ("budget", 3, ValueError),
        ("sampled_drafts", "greedy", ValueError),
        ("sampled_ar_stop", 1.0, ValueError),
        ("sampled_ar_stop", "0.4", ValueError),
        ("sampled_ar_stop", True, ValueError),
    ],
)
def test_decoding_settings_are_type_checked_when_built_set_or_loaded(saved, field, value, error):
    with pytest.raises(error, match=field):
        DecodingSettings(**{field: value})
    settings = DecodingSettings()
    with pytest.raises(error, match=field):
        setattr(settings, field, value)
    edit_config(saved, decoding={field: value})
    with pytest.raises(error, match=f"saved decoding settings are invalid.*{field}"):
        load_drafter(saved)


def test_decoding_settings_refuse_unknown_names_and_keep_plain_ints(saved):
    settings = DecodingSettings()
    with pytest.raises(AttributeError, match="no setting 'tree_size'"):
        settings.tree_size = 3
    settings.tree_budget = np.int64(12)
    assert type(settings.tree_budget) is int and DecodingSettings(**settings.to_dict()) == settings
