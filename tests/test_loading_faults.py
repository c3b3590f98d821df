"""A saved drafter loads exactly as saved, or is refused at load with a message naming the folder and its problem.

Contracts, on a tiny PARD drafter saved both ways (full weights; an adapter folder over a base LM): a draft
vocabulary that is not a non-empty 1-D run of integer ids inside the vocabulary, as many as draft_vocab_size, is
refused at load and by `set_draft_vocab` (not an IndexError inside generate); pickled weights are refused, never
skipped; a base LM other than the one `base_config` describes is refused naming both; a bad config is refused
with its own problem; a folder that is no drafter says so and lists what loads; a truncated safetensors file is
refused naming its folder; a saved decoding setting of the wrong type is refused at load.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
from conftest import VOCAB, make_drafter, tiny_target
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from test_pard import pard, tiny_lm

from hf_specdec import PardDrafter, load_drafter
from hf_specdec.models.registry import registered_formats, registered_kinds

IDS = torch.arange(3, 200)  # the draft vocabulary saved with both folders


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A base LM and a PARD drafter over it with a draft vocabulary, saved as full weights and as an adapter
    folder; returns the folder holding base/, full/ and adapter/."""
    root = tmp_path_factory.mktemp("pard")
    lm = tiny_lm()
    lm.save_pretrained(root / "base")
    drafter = pard(tiny_target("llama"), lm=lm, base_model=str(root / "base"))
    peft_model = get_peft_model(drafter, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.save_pretrained(root / "adapter")
    merged = peft_model.merge_and_unload()
    merged.set_draft_vocab(IDS)
    merged.save_adapter_folder(root / "adapter")
    merged.save_pretrained(root / "full")
    return root


def copy(saved, name: str, tmp_path):
    shutil.copytree(saved / name, tmp_path / name)
    return tmp_path / name


def edit_config(folder, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | changes))


def with_last(value: int) -> torch.Tensor:
    ids = IDS.clone()
    ids[-1] = value
    return ids


BAD_VOCABS = {
    "past the vocabulary": (with_last(VOCAB + 44), "ids up to 300, outside the target's vocabulary of 256"),
    "negative": (with_last(-1), "negative ids"),
    "float": (IDS.float(), "float32 tensor, not integer token ids"),
    "empty": (IDS[:0], "empty"),
    "2-D": (IDS[None], r"shape \(1, 197\)"),
    "another length": (IDS[:50], "holds 50 ids, not the 197 its config's draft_vocab_size says"),
}


@pytest.mark.parametrize("bad", list(BAD_VOCABS))
def test_a_bad_draft_vocabulary_in_an_adapter_folder_is_refused_at_load(saved, tmp_path, bad):
    ids, message = BAD_VOCABS[bad]
    folder = copy(saved, "adapter", tmp_path)
    save_file({"draft_vocab": ids}, str(folder / "draft_vocab.safetensors"))
    for load in (load_drafter, PardDrafter.from_pretrained, PardDrafter.from_adapter_folder):
        with pytest.raises(
            ValueError,
            match=f"draft vocabulary {re.escape(str(folder))}/draft_vocab.safetensors is unusable: .*{message}",
        ):
            load(folder)


@pytest.mark.parametrize("bad", list(BAD_VOCABS))
def test_a_bad_draft_vocabulary_in_full_weights_is_refused_at_load(saved, tmp_path, bad):
    ids, message = BAD_VOCABS[bad]
    folder = copy(saved, "full", tmp_path)
    weights = load_file(str(folder / "model.safetensors")) | {"draft_vocab": ids}
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    for load in (load_drafter, PardDrafter.from_pretrained):
        with pytest.raises(
            ValueError, match=f"draft vocabulary of the drafter at {re.escape(str(folder))}.* is unusable: .*{message}"
        ):
            load(folder)


def test_a_draft_vocabulary_file_without_draft_vocab_size_is_refused(saved, tmp_path):
    folder = copy(saved, "adapter", tmp_path)
    edit_config(folder, draft_vocab_size=None)
    with pytest.raises(
        ValueError, match="draft_vocab.safetensors is unusable: its config.json sets no draft_vocab_size"
    ):
        load_drafter(folder)


@pytest.mark.parametrize("bad", ["past the vocabulary", "negative", "float", "empty", "2-D"])
def test_set_draft_vocab_refuses_ids_the_drafter_cannot_score(saved, bad):
    drafter = load_drafter(saved / "full")
    with pytest.raises(ValueError, match=f"set_draft_vocab cannot use these token ids: .*{BAD_VOCABS[bad][1]}"):
        drafter.set_draft_vocab(BAD_VOCABS[bad][0])
    assert torch.equal(drafter.draft_vocab, IDS) and drafter.config.draft_vocab_size == len(IDS)  # unchanged
    drafter.set_draft_vocab([9, 5, 5, 7])  # a list of ints: kept sorted, each once
    assert drafter.draft_vocab.tolist() == [5, 7, 9] and drafter.config.draft_vocab_size == 3


@pytest.mark.parametrize(
    "name, weights, pickle",
    [("full", "model.safetensors", "pytorch_model.bin"), ("adapter", "adapter_model.safetensors", "adapter_model.bin")],
)
def test_pickled_weights_are_refused_never_skipped(saved, tmp_path, name, weights, pickle):
    folder = copy(saved, name, tmp_path)
    torch.save(load_file(str(folder / weights)), folder / pickle)
    (folder / weights).unlink()
    loaders = [load_drafter, PardDrafter.from_pretrained] + (
        [PardDrafter.from_adapter_folder] if name == "adapter" else []
    )
    for load in loaders:
        with pytest.raises(
            ValueError,
            match=f"{re.escape(str(folder))} keeps its weights as a pickle \\({pickle}\\).*weights_only=True",
        ):
            load(folder)


def resized_lm(vocab: int):
    lm = tiny_lm()
    lm.resize_token_embeddings(vocab)
    return lm


OTHER_BASES = {  # an LM other than the drafter's -> (its side of the message, the drafter's side)
    "layers": (lambda: tiny_lm(layers=3), "num_hidden_layers 3", "num_hidden_layers 2"),
    "vocabulary": (lambda: resized_lm(VOCAB + 64), "vocab_size 320", "vocab_size 256"),
}


@pytest.mark.parametrize("name", ["adapter", "config alone"])
@pytest.mark.parametrize("other", list(OTHER_BASES))
def test_a_base_lm_other_than_base_config_is_refused_naming_both(saved, tmp_path, name, other):
    build, theirs, ours = OTHER_BASES[other]
    build().save_pretrained(tmp_path / "other")
    folder = copy(saved, "adapter", tmp_path)
    if name == "config alone":
        (folder / "adapter_model.safetensors").unlink()
    edit_config(folder, base_model=str(tmp_path / "other"))
    other_at, mine = re.escape(str(tmp_path / "other")), re.escape(str(folder))
    message = f"the base LM at {other_at} \\({theirs}\\) is not the LM the PARD drafter in {mine} .*\\({ours}"
    with pytest.raises(ValueError, match=message):
        load_drafter(folder)


@pytest.mark.parametrize("name", ["adapter", "full"])
@pytest.mark.parametrize(
    "change, problem",
    [
        ({"mask_token_id": 9999}, "mask_token_id must be an id in 0..256"),
        ({"block_size": 1}, "block_size must be >= 2"),
        ({"base_config": None}, "PardConfig needs `base_config`"),
    ],
    ids=["mask id", "block size", "no base_config"],
)
def test_a_bad_config_in_a_pard_folder_is_refused_with_its_own_problem(saved, tmp_path, name, change, problem):
    folder = copy(saved, name, tmp_path)
    edit_config(folder, **change)
    for load in (load_drafter, PardDrafter.from_pretrained):
        with pytest.raises(ValueError, match=f"config {re.escape(str(folder))}/config.json is unusable: {problem}"):
            load(folder)


@pytest.mark.parametrize("what", ["empty folder", "unknown model_type", "plain causal LM"])
def test_a_folder_that_is_no_drafter_says_so_and_lists_what_loads(saved, tmp_path, what):
    folder = tmp_path / "folder"
    if what == "empty folder":
        folder.mkdir()
        reason = "it holds no config.json \\(the folder is empty\\)"
    elif what == "unknown model_type":
        folder = copy(saved, "full", tmp_path)
        edit_config(folder, model_type="no_such_drafter")
        reason = "its config.json names model_type 'no_such_drafter', which no registered drafter kind saves"
    else:
        folder = copy(saved, "base", tmp_path)
        reason = "its config.json is a plain 'llama' model's, not a drafter's.*PardDrafter.from_causal_lm"
    with pytest.raises(
        ValueError, match=f"{re.escape(str(folder))} is not a drafter hf_specdec can load: {reason}"
    ) as refusal:
        load_drafter(folder)
    known = [kind.model_type for kind in registered_kinds()] + [f.name for f in registered_formats()]
    assert all(name in str(refusal.value) for name in known)


@pytest.mark.parametrize(
    "name, file, what",
    [
        ("full", "model.safetensors", "the drafter checkpoint"),
        ("adapter", "adapter_model.safetensors", "the LoRA adapter"),
        ("adapter", "draft_vocab.safetensors", "the draft vocabulary"),
        ("base", "model.safetensors", "the base LM"),
    ],
)
def test_a_truncated_safetensors_file_is_refused_naming_its_folder(saved, tmp_path, name, file, what):
    folder = copy(saved, name, tmp_path)
    data = (folder / file).read_bytes()
    (folder / file).write_bytes(data[: len(data) // 2])
    if name == "base":  # the adapter folder sits on the truncated base
        adapter = copy(saved, "adapter", tmp_path)
        edit_config(adapter, base_model=str(folder))
        folder = adapter
    with pytest.raises(
        ValueError, match=f"{what} at {re.escape(str(tmp_path))}/.* could not be read: .*corrupt or truncated"
    ):
        load_drafter(folder)


@pytest.mark.parametrize("name", ["adapter", "full"])
@pytest.mark.parametrize(
    "field, value, error",
    [("tree_budget", "8", TypeError), ("tree_topk", 2.5, TypeError), ("budget", 3, ValueError)],
)
def test_a_saved_decoding_setting_of_the_wrong_type_is_refused_at_load(saved, tmp_path, name, field, value, error):
    folder = copy(saved, name, tmp_path)
    edit_config(folder, decoding={field: value})
    for load in (load_drafter, PardDrafter.from_pretrained):
        with pytest.raises(
            error,
            match=f"{re.escape(str(folder))}/config.json is unusable: .*saved decoding settings are invalid.*{field}",
        ):
            load(folder)


@pytest.mark.parametrize("ids", [[3, 256], [-1, 4], [], [[1, 2]], [1.5, 2.0]], ids=str)
def test_a_block_drafters_set_draft_vocab_refuses_ids_it_cannot_score(ids):
    drafter = make_drafter(tiny_target("llama"), 4)
    with pytest.raises(ValueError, match="set_draft_vocab cannot use these token ids"):
        drafter.set_draft_vocab(torch.tensor(ids) if ids and isinstance(ids[0], float) else ids)
    assert drafter.config.draft_vocab_size is None and drafter.draft_vocab is None  # nothing changed
