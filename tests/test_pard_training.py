"""Training a PARD drafter: the conditional-drop layout, the loss going down, LoRA runs that resume exactly and
save an adapter folder that loads as a drafter."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import MASK_ID, VOCAB, saved_run_inputs, tiny_target
from test_pard import tiny_lm

import hf_specdec
from hf_specdec import PardDrafter
from hf_specdec.training.config import DistillationConfig
from hf_specdec.training.pard import conditional_drop_layout
from hf_specdec.training.run import run, set_up


def test_every_kept_mask_row_keeps_its_chain_and_sees_only_its_anchor_prefix():
    g = torch.Generator().manual_seed(0)
    layout = conditional_drop_layout(40, 8, ratio=0.7, floor=0.2, rng=g)
    kept = {(int(d), int(t)) for d, t in zip(layout.depth, layout.slot, strict=True)}
    counts = [int((layout.depth == d).sum()) for d in range(8)]
    assert counts[0] == 40 and counts[1] == 28 and counts[7] == 8  # round(40 * max(0.7^d, 0.2))
    for d, t in kept:
        if d > 0:
            assert (d - 1, t - 1) in kept  # the chain of earlier masks is there
    allowed = layout.allowed()
    for e, (d, _t, a) in enumerate(
        zip(layout.depth.tolist(), layout.slot.tolist(), layout.anchor.tolist(), strict=True)
    ):
        seen = {(layout.depth[f].item(), layout.slot[f].item()) for f in allowed[e].nonzero().flatten().tolist()}
        expected = {(0, s) for s in range(a + 1)} | {(j, a + j) for j in range(1, d + 1)}
        assert seen == expected


def test_without_drop_every_copy_is_there():
    layout = conditional_drop_layout(10, 4, ratio=1.0, floor=1.0)
    assert [int((layout.depth == d).sum()) for d in range(4)] == [10, 9, 8, 7]


def _config(tmp_path, **overrides) -> DistillationConfig:
    values = dict(
        objective="pard",
        target=str(tmp_path / "target"),
        output_dir=str(tmp_path / "run"),
        data_file=str(tmp_path / "data.jsonl"),
        base_lm=str(tmp_path / "lm"),
        block_size=4,
        mask_token_id=MASK_ID,
        num_steps=30,
        batch_size=2,
        learning_rate=3e-3,
        save_every=10,
        num_target_taps=1,
    )
    return DistillationConfig(**{**values, **overrides})


def test_pard_training_lowers_the_loss_and_saves_a_loadable_adapter_folder(tmp_path):
    saved_run_inputs(tmp_path, sequences=4)
    tiny_lm().save_pretrained(tmp_path / "lm")
    run(_config(tmp_path, lora_rank=4, lora_alpha=8))
    log = json.loads((tmp_path / "run" / "training_log.json").read_text())
    losses = [loss for _, loss in log["losses"]]
    assert log["objective"] == "pard"
    assert sum(losses[-5:]) / 5 < 0.9 * sum(losses[:5]) / 5
    adapter = tmp_path / "run" / "adapter"
    assert (adapter / "config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()
    drafter = hf_specdec.load_drafter(adapter)
    merged = hf_specdec.load_drafter(tmp_path / "run" / "drafter")
    assert isinstance(drafter, PardDrafter) and isinstance(merged, PardDrafter)
    mask_row = drafter.get_input_embeddings().weight[MASK_ID]
    assert not torch.allclose(mask_row, tiny_lm().get_input_embeddings().weight[MASK_ID])  # the mask row trained
    for name, tensor in merged.state_dict().items():
        assert torch.allclose(drafter.state_dict()[name].float(), tensor.float(), atol=1e-2), name
    size = (tmp_path / "run" / "checkpoint" / "model.safetensors").stat().st_size  # trainable tensors only
    assert size < 0.5 * sum(p.numel() * 4 for p in tiny_lm().parameters())


def test_a_run_from_a_saved_adapter_trains_that_adapter_on(tmp_path):
    """--drafter naming a PARD adapter folder (e.g. the shipped one, on a fresh machine) with LoRA: the run trains
    that adapter on, and its adapter folder loads as the drafter it trained (not the base plus the new steps)."""
    saved_run_inputs(tmp_path, sequences=4)
    tiny_lm().save_pretrained(tmp_path / "lm")
    run(_config(tmp_path, lora_rank=4, lora_alpha=8, num_steps=6, save_every=3))
    first = tmp_path / "run" / "adapter"
    # another --lora_alpha than the saved one: the adapter keeps its own, and the run says so
    more = dict(output_dir=str(tmp_path / "more"), drafter=str(first), lora_alpha=16, num_steps=6, save_every=3)
    with pytest.raises(ValueError, match="rank 4"):
        run(_config(tmp_path, lora_rank=8, **more))
    run(_config(tmp_path, lora_rank=4, **more))
    continued = hf_specdec.load_drafter(tmp_path / "more" / "adapter").state_dict()
    merged = hf_specdec.load_drafter(tmp_path / "more" / "drafter").state_dict()
    before = hf_specdec.load_drafter(first).state_dict()
    for name, tensor in merged.items():
        assert torch.allclose(continued[name].float(), tensor.float(), atol=1e-2), name
    moved = [n for n, t in before.items() if not torch.allclose(t.float(), continued[n].float(), atol=1e-4)]
    assert moved  # the six steps trained on
    adapter = json.loads((tmp_path / "more" / "adapter" / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and adapter["lora_alpha"] == 8
    adjusted = json.loads((tmp_path / "more" / "training_log.json").read_text())["adjustments"]
    assert any("--lora_alpha 16.0 was not applied" in note and "keeps its 8.0" in note for note in adjusted), adjusted


def test_a_killed_pard_run_resumes_to_the_same_adapter(tmp_path):
    for name in ("a", "b"):
        saved_run_inputs(tmp_path / name, sequences=4)
        tiny_lm().save_pretrained(tmp_path / name / "lm")
    run(_config(tmp_path / "a", lora_rank=4, num_steps=12, save_every=4))
    config = _config(tmp_path / "b", lora_rank=4, num_steps=12, save_every=4)
    trainer, _ = set_up(config.for_objective())

    def crash(step, loss):
        if step == 6:  # after the checkpoint at step 4: steps 5-6 are lost
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        trainer.train(on_step_end=crash)
    run(config)
    log = json.loads((tmp_path / "b" / "run" / "training_log.json").read_text())
    assert log["resumed"] and log["steps"] == 12
    a = hf_specdec.load_drafter(tmp_path / "a" / "run" / "drafter").state_dict()
    b = hf_specdec.load_drafter(tmp_path / "b" / "run" / "drafter").state_dict()
    for name, tensor in a.items():
        assert torch.equal(tensor, b[name]), name


def test_the_packed_pass_honours_the_layout_mask():
    """A mask row's output does not move when a real token past its anchor changes (the model uses the 4-D mask)."""
    from conftest import tiny_target

    target = tiny_target("llama")
    drafter = PardDrafter.from_causal_lm(tiny_lm(), target, mask_token_id=MASK_ID, block_size=4).eval()
    layout = conditional_drop_layout(12, 4, ratio=1.0, floor=1.0)
    ids = torch.randint(3, 200, (12,), generator=torch.Generator().manual_seed(1))
    mask = torch.zeros(len(layout.slot), len(layout.slot)).masked_fill(~layout.allowed(), float("-inf"))

    def hidden(seq):
        x = layout.input_ids(seq, MASK_ID)[None]
        return drafter(x, position_ids=layout.slot[None], attention_mask=mask[None, None]).last_hidden_state[0]

    changed = ids.clone()
    changed[6] = (ids[6] + 1) % 200 + 3
    a, b = hidden(ids), hidden(changed)
    blind = layout.anchor < 6  # elements whose anchor is before slot 6 must not see it
    assert torch.allclose(a[blind], b[blind], atol=1e-5)
    assert not torch.allclose(a[~blind], b[~blind], atol=1e-5)


def test_export_only_saves_a_checkpoint_mid_run_without_training_on(tmp_path):
    saved_run_inputs(tmp_path, sequences=4)
    tiny_lm().save_pretrained(tmp_path / "lm")
    config = _config(tmp_path, lora_rank=4, num_steps=12, save_every=4)
    trainer, _ = set_up(config.for_objective())

    def crash(step, loss):
        if step == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        trainer.train(on_step_end=crash)
    from upkeep.ship import ship_drafter

    # the checkpoint holds the LoRA weights alone: shipping it says how to save a drafter first, and writes nothing
    with pytest.raises(ValueError, match="--export_only"):
        ship_drafter(tmp_path / "run", "mid", "python ...", drafters_dir=tmp_path / "d")
    assert not (tmp_path / "d" / "mid").exists()
    run(_config(tmp_path, lora_rank=4, num_steps=12, save_every=4, export_only=True))
    log = json.loads((tmp_path / "run" / "training_log.json").read_text())
    assert log["steps"] == 4 and log["resumed"]  # the checkpoint at step 4, saved as it is
    assert isinstance(hf_specdec.load_drafter(tmp_path / "run" / "adapter"), PardDrafter)
    assert isinstance(
        hf_specdec.load_drafter(ship_drafter(tmp_path / "run", "mid", "python ...", drafters_dir=tmp_path / "d")),
        PardDrafter,
    )


def test_a_pard_run_ships_as_its_adapter_with_a_draft_vocabulary(tmp_path):
    from upkeep.ship import ship_drafter

    saved_run_inputs(tmp_path, sequences=4)
    tiny_lm().save_pretrained(tmp_path / "lm")
    run(_config(tmp_path, lora_rank=4, num_steps=4, save_every=2))
    out = ship_drafter(
        tmp_path / "run",
        "tiny-pard",
        "python scripts/train_drafter.py ...",
        drafters_dir=tmp_path / "d",
        decoding={"tree_budget": 4},
        draft_vocab_size=100,
    )
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        "TRAINING.md",
        "adapter_config.json",
        "adapter_model.safetensors",
        "config.json",
        "draft_vocab.safetensors",
    ] + (["loss.png"] if "loss.png" in files else [])
    shipped = hf_specdec.load_drafter(out)
    assert isinstance(shipped, PardDrafter) and shipped.decoding.tree_budget == 4
    assert shipped.draft_vocab.tolist() == list(range(100))  # the first 100 ids (EOS, id 2, among them)
    assert "PARD over" in (out / "TRAINING.md").read_text()


def test_features_added_to_a_saved_adapter_train_and_ship_beside_it(tmp_path):
    """PARD-2 from a PARD-1 adapter (the shipped one's path): --feature_injection --feature_layers adds a zero
    projection of those layers, trains it with the adapter, saves it beside the adapter, loads back, exports as
    PARD-2, and generate stays exact."""
    saved_run_inputs(tmp_path, sequences=4)
    tiny_lm().save_pretrained(tmp_path / "lm")
    run(_config(tmp_path, lora_rank=4, lora_alpha=8, num_steps=4, save_every=2))
    first = tmp_path / "run" / "adapter"
    more = dict(output_dir=str(tmp_path / "p2"), drafter=str(first), num_steps=4, save_every=2, feature_dropout=0.0)
    run(_config(tmp_path, lora_rank=4, feature_injection=True, feature_layers=[-1, -3], feature_scale=0.5, **more))
    adapter = tmp_path / "p2" / "adapter"
    assert (adapter / "feature_proj.safetensors").is_file()
    drafter = hf_specdec.load_drafter(adapter).eval()
    merged = hf_specdec.load_drafter(tmp_path / "p2" / "drafter").eval()
    assert drafter.config.target_layer_ids == [-1, -3] and drafter.config.feature_scale == 0.5
    assert torch.count_nonzero(drafter.feature_proj.weight) > 0  # trained from zero
    torch.testing.assert_close(
        drafter.feature_proj.weight, merged.feature_proj.weight.to(drafter.dtype), atol=1e-3, rtol=0
    )
    target = tiny_target("llama")
    prompt = torch.randint(3, VOCAB - 1, (1, 9), generator=torch.Generator().manual_seed(1))
    plain = target.generate(prompt, max_new_tokens=16, do_sample=False)
    assert torch.equal(target.generate(prompt, max_new_tokens=16, do_sample=False, assistant_model=drafter), plain)
    out = hf_specdec.export_drafter(drafter, tmp_path / "exported", format="pard2")
    assert json.loads((out / "config.json").read_text())["pard2_target_layers"] == [-1, -3]
    with pytest.raises(ValueError, match="--feature_layers"):
        _config(tmp_path, feature_layers=[-1])


def test_a_pard2_run_ships_without_its_features_and_drafts_as_that_adapter_without_them(tmp_path):
    """--without_features: the run's adapter ships with no projection and a config that reads no features; it
    drafts exactly what the featured adapter drafts when given no features, and generate stays exact. A run
    without features is refused before anything is written."""
    from upkeep.ship import ship_drafter

    saved_run_inputs(tmp_path, sequences=4)
    tiny_lm().save_pretrained(tmp_path / "lm")
    run(_config(tmp_path, lora_rank=4, lora_alpha=8, num_steps=2, save_every=2))
    more = dict(output_dir=str(tmp_path / "p2"), drafter=str(tmp_path / "run" / "adapter"), num_steps=2)
    run(_config(tmp_path, lora_rank=4, feature_injection=True, feature_layers=[-1], save_every=2, **more))
    with pytest.raises(ValueError, match="reads no target features"):
        ship_drafter(tmp_path / "run", "plain", "python ...", drafters_dir=tmp_path / "d", without_features=True)
    assert not (tmp_path / "d" / "plain").exists()
    out = ship_drafter(tmp_path / "p2", "p2", "python ...", drafters_dir=tmp_path / "d", without_features=True)
    assert not (out / "feature_proj.safetensors").exists()
    assert json.loads((out / "config.json").read_text())["feature_injection"] is False
    assert "not shipped: the projection of target layers [-1]" in (out / "TRAINING.md").read_text()
    shipped = hf_specdec.load_drafter(out).eval()
    featured = hf_specdec.load_drafter(tmp_path / "p2" / "adapter", dtype=shipped.dtype).eval()
    assert shipped.feature_proj is None and featured.feature_proj is not None
    ids = torch.randint(3, VOCAB - 1, (1, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(shipped(ids).last_hidden_state, featured(ids).last_hidden_state)
    target = tiny_target("llama")
    prompt = torch.randint(3, VOCAB - 1, (1, 9), generator=torch.Generator().manual_seed(1))
    plain = target.generate(prompt, max_new_tokens=16, do_sample=False)
    assert torch.equal(target.generate(prompt, max_new_tokens=16, do_sample=False, assistant_model=shipped), plain)


def test_without_features_refuses_an_adapter_file_that_holds_the_projection(tmp_path):
    """A run whose LoRA adapter file itself holds the projection (features trained from the start) cannot ship
    without it: the copied adapter would still carry it. Refused with the reason, before anything is written."""
    from safetensors.torch import load_file, save_file

    from upkeep.ship import ship_drafter

    saved_run_inputs(tmp_path, sequences=4)
    tiny_lm().save_pretrained(tmp_path / "lm")
    run(_config(tmp_path, lora_rank=4, lora_alpha=8, num_steps=2, save_every=2))
    more = dict(output_dir=str(tmp_path / "p2"), drafter=str(tmp_path / "run" / "adapter"), num_steps=2)
    run(_config(tmp_path, lora_rank=4, feature_injection=True, feature_layers=[-1], save_every=2, **more))
    adapter = tmp_path / "p2" / "adapter"
    weights = load_file(adapter / "adapter_model.safetensors")
    proj = load_file(adapter / "feature_proj.safetensors")
    weights.update({f"base_model.model.feature_proj.{k}": v for k, v in proj.items()})
    save_file(weights, str(adapter / "adapter_model.safetensors"))
    with pytest.raises(ValueError, match="holds the target-feature projection itself"):
        ship_drafter(tmp_path / "p2", "p2", "python ...", drafters_dir=tmp_path / "d", without_features=True)
    assert not (tmp_path / "d" / "p2").exists()
