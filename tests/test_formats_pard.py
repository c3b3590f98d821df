"""AMD's PARD-1 and PARD-2 layouts, read and written (`models/formats/pard.py`), on tiny checkpoints in the exact layout
AMD's trainers write (`AMD-AGI/PARD` @ 6f279bf, `pard/pard_train.py`, `pard/pard2_train.py`): the base LM's own config,
architecture and weight names, plus top-level `pard_token` and `spd_type: "pard"`; for PARD-2 `pard2`, `spd_type:
"pard2"`, `pard2_scale`, `pard2_proj_bias`, `pard2_target_dim`, `pard2_target_layers` and `warp_model.bin` holding
`target_proj.weight` (H_draft, H_target x layers)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import MASK_ID, VOCAB, assert_batch_and_server_equal_plain, tiny_target
from test_pard import tiny_lm
from transformers import AutoModel, AutoModelForCausalLM, GenerationConfig, LlamaConfig, LlamaForCausalLM

import hf_specdec
from hf_specdec import DecodingSettings, PardDrafter
from hf_specdec.models.formats.pard import export_pard1, export_pard2
from hf_specdec.models.pard import PardCandidateGenerator
from hf_specdec.models.target_features import hidden_state_indices


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


def test_what_the_pard1_reader_cannot_honour_is_refused_and_a_shorter_vocabulary_runs(tmp_path):
    lm = tiny_lm()
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
    target = tiny_target("llama")  # more ids than the drafter (as Qwen2.5-7B's 152064 rows over the 0.5B's 151936)
    prompt = torch.tensor([[5, 6, 7]])
    out = target.generate(prompt, max_new_tokens=8, do_sample=False, assistant_model=drafter, eos_token_id=None)
    assert torch.equal(out, target.generate(prompt, max_new_tokens=8, do_sample=False, eos_token_id=None))
    write_pard1(tmp_path / "stray", lm)
    from safetensors.torch import load_file, save_file

    weights = load_file(str(tmp_path / "stray" / "model.safetensors"))
    save_file({**weights, "extra.weight": torch.zeros(2)}, str(tmp_path / "stray" / "model.safetensors"))
    with pytest.raises(ValueError, match="extra.weight"):
        hf_specdec.load_drafter(tmp_path / "stray")


# ---- PARD-2 ---------------------------------------------------------------------------------------------------------

TARGET_H = 64  # tiny_target's hidden size; tiny_lm's is 32


def write_pard2(folder, lm, layers, weight=None, bias=None, **extra):
    """What `pard2_train.py` leaves for inference (`prepare_pard2_infer_config`, `_convert_checkpoint_for_infer_impl`):
    the LM as it is, the pard2_* keys, `warp_model.bin` = torch.save({"target_proj.weight"[, "target_proj.bias"]})."""
    lm.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    dim = TARGET_H * len(layers)
    keys = dict(pard_token=MASK_ID, spd_type="pard2", pard2=True, pard2_scale=0.02, pard2_proj_bias=bias is not None)
    config.update(keys, pard2_target_dim=dim, pard2_target_layers=layers)
    config.update(extra)
    config = {k: v for k, v in config.items() if v is not None}
    (folder / "config.json").write_text(json.dumps(config))
    if weight is None:
        weight = torch.zeros(lm.config.hidden_size, dim)
    tensors = {"target_proj.weight": weight} | ({} if bias is None else {"target_proj.bias": bias})
    torch.save(tensors, folder / "warp_model.bin")


def projection(layers: int, seed: int = 7, std: float = 3.0) -> torch.Tensor:
    """(32, 64 * layers) a projection large enough to change the drafts at scale 0.02."""
    return std * torch.randn(32, TARGET_H * layers, generator=torch.Generator().manual_seed(seed))


def pard2_scores(drafter, target, ids: torch.Tensor, k: int) -> torch.Tensor:
    """(k, V) hf_specdec's draft scores after the target ran over every committed token but the anchor."""
    generator = PardCandidateGenerator(drafter, target, GenerationConfig())
    with torch.no_grad():
        out = target(ids[:, :-1], output_hidden_states=hidden_state_indices(generator.layer_ids))
    generator._receive(out, ids.shape[1])
    return generator.draft_scores(ids, k)[1]


def pard2_by_hand(lm, target, ids, layers, weight, scale, k, bias=None) -> torch.Tensor:
    """(k, V) PARD-2's rule written out (`pard2_infer.py`): features `hidden_states[l]` for l in the listed order,
    shifted right with a zero row first, mask slots repeating the last real token's, `embed + scale * proj`."""
    T = ids.shape[1]
    with torch.no_grad():
        states = target(ids[:, :-1], output_hidden_states=True).hidden_states  # L+1 entries, [-1] post-norm
        feat = torch.cat([states[l] for l in layers], dim=-1)  # (1, T-1, 64n): tokens 0..T-2
        shifted = torch.cat([torch.zeros_like(feat[:, :1]), feat], dim=1)  # (1, T, 64n): token t gets t-1's
        fed = torch.cat([ids, torch.full((1, k), MASK_ID)], dim=1)  # (1, T + k)
        feats = torch.cat([shifted, shifted[:, -1:].expand(-1, k, -1)], dim=1)  # masks repeat the anchor's
        proj = feats @ weight.T + (0 if bias is None else bias)  # (1, T + k, 32)
        embeds = lm.get_input_embeddings()(fed) + scale * proj
        return lm(inputs_embeds=embeds).logits[0, T - 1 : T - 1 + k]


def test_a_pard2_folder_with_a_zero_projection_drafts_as_pard1(tmp_path):
    target, lm = tiny_target("llama"), tiny_lm()
    write_pard2(tmp_path / "p2", lm, [-1, -3])
    write_pard1(tmp_path / "p1", lm)
    p2, p1 = hf_specdec.load_drafter(tmp_path / "p2").eval(), hf_specdec.load_drafter(tmp_path / "p1").eval()
    assert p2.feature_proj is not None and p2.config.target_layer_ids == [-1, -3] and p1.feature_proj is None
    ids = torch.randint(3, VOCAB - 1, (1, 12), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(pard2_scores(p2, target, ids, 3), pard2_scores(p1, target, ids, 3))


@pytest.mark.parametrize("layers", [[-1, -3], [-3, -1], [2], [-1]], ids=str)
def test_a_pard2_folder_fuses_the_target_features_as_pard2_defines(tmp_path, layers):
    """Listed order, negative and positive hidden_states indices (-1 the post-norm last state), the scale, a bias."""
    target, lm = tiny_target("llama"), tiny_lm()
    weight = projection(len(layers))
    bias = torch.randn(32, generator=torch.Generator().manual_seed(2)) if layers == [-1] else None
    write_pard2(tmp_path, lm, layers, weight=weight, bias=bias, pard2_scale=0.05)
    drafter = hf_specdec.load_drafter(tmp_path).eval()
    assert drafter.config.feature_scale == 0.05 and (drafter.feature_proj.bias is not None) == (bias is not None)
    ids = torch.randint(3, VOCAB - 1, (1, 12), generator=torch.Generator().manual_seed(1))
    ours = pard2_scores(drafter, target, ids, 3)
    torch.testing.assert_close(ours, pard2_by_hand(lm, target, ids, layers, weight, 0.05, 3, bias), atol=1e-4, rtol=0)
    zero = pard2_by_hand(lm, target, ids, layers, torch.zeros_like(weight), 0.05, 3)
    assert not torch.allclose(ours, zero, atol=1e-3)  # the features change the drafts: the fusion is exercised


@pytest.mark.parametrize(
    "keys, scale",
    [
        ({"pard2_scale": None}, 0.02),
        ({"pard2_scale": None, "pard_scale": 0.5}, 0.5),
        ({"pard2_scale": None, "feat_scale": 0.3}, 0.3),
        ({"pard2_scale": 1.5}, 1.5),
    ],
)
def test_the_pard2_scale_falls_back_as_pard2_infer_does_ending_at_002(tmp_path, keys, scale):
    write_pard2(tmp_path, tiny_lm(), [-1], **keys)
    assert hf_specdec.load_drafter(tmp_path).config.feature_scale == scale


@pytest.mark.parametrize("settings", ["chain", "tree"])
def test_greedy_output_through_a_loaded_pard2_drafter_is_the_targets(tmp_path, settings):
    target = tiny_target("llama")
    write_pard2(tmp_path, tiny_lm(), [-1, -2], weight=projection(2))
    drafter = hf_specdec.load_drafter(tmp_path).eval()
    drafter.decoding = DecodingSettings(budget="fixed", tree_budget=0 if settings == "chain" else 6)
    prompts = [torch.randint(3, VOCAB - 1, (n,), generator=torch.Generator().manual_seed(n)) for n in (9, 12)]
    plain = target.generate(prompts[0][None], max_new_tokens=20, do_sample=False)
    out = target.generate(prompts[0][None], max_new_tokens=20, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, plain) and drafter.last_acceptance_stats.verify_forwards > 0
    assert_batch_and_server_equal_plain(target, drafter, prompts, 16)


def test_export_writes_pard2_that_loads_back_identical(tmp_path):
    target = tiny_target("llama")
    drafter = PardDrafter.from_causal_lm(
        tiny_lm(seed=9),
        target,
        mask_token_id=MASK_ID,
        block_size=4,
        feature_injection=True,
        target_layer_ids=[3, 1],
        feature_bias=True,
    ).eval()
    with torch.no_grad():
        drafter.feature_proj.weight.copy_(projection(2, seed=3))
        drafter.feature_proj.bias.normal_()
    out = export_pard2(drafter, tmp_path / "pard2")
    config = json.loads((out / "config.json").read_text())
    assert config["spd_type"] == "pard2" and config["pard2"] is True and config["pard_token"] == MASK_ID
    assert config["pard2_target_layers"] == [-1, -3] and config["pard2_target_dim"] == 2 * TARGET_H
    assert config["pard2_scale"] == 0.02 and config["pard2_proj_bias"] is True and config["model_type"] == "llama"
    warp = torch.load(out / "warp_model.bin", weights_only=True)
    assert set(warp) == {"target_proj.weight", "target_proj.bias"} and warp["target_proj.weight"].shape == (32, 128)
    plain_lm = AutoModelForCausalLM.from_pretrained(out).eval()  # still an ordinary LM for transformers
    ids = torch.randint(3, VOCAB - 1, (1, 10), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(plain_lm(ids).logits, drafter.lm(ids).logits)
    loaded = hf_specdec.load_drafter(out).eval()
    assert loaded.config.target_layer_ids == [-1, -3]
    torch.testing.assert_close(pard2_scores(loaded, target, ids, 3), pard2_scores(drafter, target, ids, 3))
    for d in (drafter, loaded):
        d.decoding = DecodingSettings(budget="fixed", tree_budget=4)
    a = target.generate(ids, max_new_tokens=16, do_sample=False, assistant_model=drafter)
    b = target.generate(ids, max_new_tokens=16, do_sample=False, assistant_model=loaded)
    assert torch.equal(a, b) and loaded.last_acceptance_stats.accepted == drafter.last_acceptance_stats.accepted
    with pytest.raises(ValueError, match="format='pard2'"):
        export_pard1(drafter, tmp_path / "as-pard1")
    with pytest.raises(ValueError, match="format='pard'"):
        export_pard2(PardDrafter.from_causal_lm(tiny_lm(), target, mask_token_id=MASK_ID), tmp_path / "no-features")


def test_automodel_reads_published_pard_folders_and_automodelforcausallm_the_plain_lm(tmp_path):
    lm = tiny_lm()
    write_pard1(tmp_path / "p1", lm)
    write_pard2(tmp_path / "p2", lm, [-1], weight=projection(1))
    for folder in ("p1", "p2"):
        assert type(AutoModel.from_pretrained(tmp_path / folder)) is PardDrafter
        assert type(AutoModelForCausalLM.from_pretrained(tmp_path / folder)) is LlamaForCausalLM
    loaded = AutoModel.from_pretrained(tmp_path / "p2")
    assert torch.equal(loaded.feature_proj.weight, projection(1))


def small_target() -> LlamaForCausalLM:
    """A target of another width (32) than the one the PARD-2 folders are built for (64)."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    return LlamaForCausalLM(config).eval()


def test_what_the_pard2_reader_cannot_honour_is_refused(tmp_path):
    lm, prompt = tiny_lm(), torch.tensor([[5, 6, 7, 8]])
    write_pard2(tmp_path / "ok", lm, [-1, -3])
    drafter = hf_specdec.load_drafter(tmp_path / "ok")
    with pytest.raises(ValueError, match=r"hidden size 64 != target's 32"):  # both sides named
        small_target().generate(prompt, max_new_tokens=4, do_sample=False, assistant_model=drafter)
    write_pard2(tmp_path / "deep", lm, [-1, -6])
    with pytest.raises(ValueError, match=r"tapped layers \[-1, -6\] reach past the target's 4"):
        tiny_target("llama").generate(
            prompt, max_new_tokens=4, do_sample=False, assistant_model=hf_specdec.load_drafter(tmp_path / "deep")
        )
    write_pard2(tmp_path / "embeddings", lm, [0, -1])
    with pytest.raises(ValueError, match="embedding output"):
        hf_specdec.load_drafter(tmp_path / "embeddings")
    write_pard2(tmp_path / "no-layers", lm, [-1], pard2_target_layers=None)
    with pytest.raises(ValueError, match="needs pard2_target_layers"):
        hf_specdec.load_drafter(tmp_path / "no-layers")
    write_pard2(tmp_path / "no-warp", lm, [-1])
    (tmp_path / "no-warp" / "warp_model.bin").unlink()
    with pytest.raises(ValueError, match="no warp_model.bin"):
        hf_specdec.load_drafter(tmp_path / "no-warp")
    write_pard2(tmp_path / "shape", lm, [-1, -2], weight=torch.zeros(32, TARGET_H))
    with pytest.raises(ValueError, match="holds target_proj tensors"):
        hf_specdec.load_drafter(tmp_path / "shape")
    write_pard2(tmp_path / "dim", lm, [-1, -2], pard2_target_dim=127)
    with pytest.raises(ValueError, match="pard2_target_dim 127"):
        hf_specdec.load_drafter(tmp_path / "dim")
