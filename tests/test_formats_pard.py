"""AMD's PARD-1 layout, read and written (`models/formats/pard.py`), on tiny checkpoints in the exact layout its trainer
writes: the base LM's own config, architecture and weight names, plus top-level `pard_token` and `spd_type: "pard"`."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import MASK_ID, VOCAB, assert_batch_and_server_equal_plain, tiny_target
from test_pard import tiny_lm
from transformers import AutoModelForCausalLM, GenerationConfig

import hf_specdec
from hf_specdec import DecodingSettings, PardDrafter
from hf_specdec.models.formats.pard import export_pard1


def write_pard1(folder, lm, **extra) -> None:
    """What `pard_train.py` leaves: the LM saved as it is, `pard_token` and `spd_type` added to its config."""
    lm.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(pard_token=MASK_ID, spd_type="pard", **extra)
    (folder / "config.json").write_text(json.dumps(config))


def test_a_pard1_folder_loads_as_a_pard_drafter_whose_first_draft_is_the_lms_argmax(tmp_path):
    target, lm = tiny_target("llama"), tiny_lm()
    write_pard1(tmp_path, lm)
    drafter = hf_specdec.load_drafter(tmp_path).eval()
    assert type(drafter) is PardDrafter and drafter.config.mask_token_id == MASK_ID
    prompt = torch.randint(3, VOCAB - 1, (1, 11), generator=torch.Generator().manual_seed(4))
    generator = hf_specdec.models.registry.generator_class_for(drafter)(drafter, target, GenerationConfig())
    _, scores = generator.draft_scores(prompt, 3)  # (3, V)
    by_hand = lm(torch.cat([prompt, torch.full((1, 2), MASK_ID)], dim=1)).logits[0, -3:]  # (3, V): anchor, masks
    assert int(scores[0].argmax()) == int(lm(prompt).logits[0, -1].argmax())  # draft 1: the LM's own next token
    torch.testing.assert_close(scores.float(), by_hand.float(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("settings", ["chain", "tree"])
def test_greedy_output_through_a_loaded_pard1_drafter_is_the_targets(tmp_path, settings):
    target = tiny_target("llama")
    write_pard1(tmp_path, tiny_lm())
    drafter = hf_specdec.load_drafter(tmp_path).eval()
    drafter.decoding = DecodingSettings(budget="fixed", tree_budget=0 if settings == "chain" else 6)
    prompts = [torch.randint(3, VOCAB - 1, (n,), generator=torch.Generator().manual_seed(n)) for n in (9, 12)]
    plain = target.generate(prompts[0][None], max_new_tokens=20, do_sample=False)
    out = target.generate(prompts[0][None], max_new_tokens=20, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, plain) and drafter.last_acceptance_stats.verify_forwards > 0
    assert_batch_and_server_equal_plain(target, drafter, prompts, 16)


def test_export_writes_pard1_that_transformers_loads_as_the_lm_and_that_loads_back_identical(tmp_path):
    target = tiny_target("llama")
    drafter = PardDrafter.from_causal_lm(tiny_lm(seed=9), target, mask_token_id=MASK_ID, block_size=4).eval()
    out = export_pard1(drafter, tmp_path / "pard1")
    config = json.loads((out / "config.json").read_text())
    assert config["pard_token"] == MASK_ID and config["spd_type"] == "pard" and config["model_type"] == "llama"
    assert config["architectures"] == ["LlamaForCausalLM"] and "hf_specdec" not in json.dumps(config)
    plain_lm = AutoModelForCausalLM.from_pretrained(out).eval()  # an ordinary LM
    ids = torch.randint(3, VOCAB - 1, (1, 10), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(plain_lm(ids).logits, drafter.lm(ids).logits)
    loaded = hf_specdec.load_drafter(out).eval()
    for d in (drafter, loaded):
        d.decoding = DecodingSettings(budget="fixed", tree_budget=4)
    a = target.generate(ids, max_new_tokens=16, do_sample=False, assistant_model=drafter)
    b = target.generate(ids, max_new_tokens=16, do_sample=False, assistant_model=loaded)
    assert torch.equal(a, b) and loaded.last_acceptance_stats.accepted == drafter.last_acceptance_stats.accepted
    with pytest.raises(ValueError, match="not empty"):
        export_pard1(drafter, out)


def test_what_the_pard1_reader_cannot_honour_is_refused(tmp_path):
    lm = tiny_lm()
    write_pard1(tmp_path / "pard2", lm, pard2=True, pard2_target_layers=[-1], pard2_scale=0.02)
    with pytest.raises(ValueError, match="PARD-2"):
        hf_specdec.load_drafter(tmp_path / "pard2")
    write_pard1(tmp_path / "row", lm)
    config = json.loads((tmp_path / "row" / "config.json").read_text())
    (tmp_path / "row" / "config.json").write_text(json.dumps({**config, "pard_token": VOCAB + 5}))
    with pytest.raises(ValueError, match="pard_token must be an embedding row"):
        hf_specdec.load_drafter(tmp_path / "row")
    small = tiny_lm()
    small.resize_token_embeddings(MASK_ID + 1 - 55)  # a vocabulary short of the target's
    write_pard1(tmp_path / "small", small)
    config = json.loads((tmp_path / "small" / "config.json").read_text())
    (tmp_path / "small" / "config.json").write_text(json.dumps({**config, "pard_token": 3}))
    drafter = hf_specdec.load_drafter(tmp_path / "small").eval()
    target = tiny_target("llama")
    with pytest.raises(ValueError, match=r"vocab size 201 \(the drafter's own\) < target's 256"):
        target.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=4, do_sample=False, assistant_model=drafter)
