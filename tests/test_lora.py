"""LoRA adapters on drafters: only adapters train, adapter-only save, merge, load back; the pipeline end to end."""

import json
from pathlib import Path

import pytest
import torch
from conftest import MASK_ID, make_drafter, saved_run_inputs, tiny_target

from hf_specdec import BlockDrafter, DCOCODrafter, load_drafter
from hf_specdec.training.config import DistillationConfig
from hf_specdec.training.lora import add_lora, merge_lora, save_adapter
from hf_specdec.training.run import run
from hf_specdec.training.specopd import SpecOPDTrainer


def block_output(drafter, target):
    torch.manual_seed(0)
    feats = torch.randn(1, 6, len(drafter.config.target_layer_ids) * target.config.hidden_size)
    noise = target.get_input_embeddings()(torch.tensor([[5] + [MASK_ID] * 3]))
    with torch.no_grad():
        return drafter(noise_embeds=noise, target_features=feats, position_ids=torch.arange(10)[None]).last_hidden_state


def config_for(tmp_path, **kw):
    return DistillationConfig(target="t", output_dir=str(tmp_path), lora_rank=4, **kw)


@pytest.mark.parametrize("cls", [BlockDrafter, DCOCODrafter])
def test_adapter_only_save_merge_and_load_back(tmp_path, cls):
    target = tiny_target("llama")
    base = make_drafter(target, 4, cls=cls).float()
    base.save_pretrained(tmp_path / "base")
    adapted = add_lora(base, config_for(tmp_path), str(tmp_path / "base"))
    trainable = {n for n, p in base.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or "corrector" in n for n in trainable)
    for name, p in base.named_parameters():  # peft starts B at zero: make the adapters matter
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.2)
    with_adapter = block_output(base, target)
    assert not torch.allclose(with_adapter, block_output(load_drafter(tmp_path / "base"), target))
    save_adapter(adapted, tmp_path / "adapter")
    files = {p.name for p in (tmp_path / "adapter").iterdir()}
    assert files == {"adapter_config.json", "adapter_model.safetensors", "README.md"}
    loaded = load_drafter(tmp_path / "adapter")  # base named in the adapter config, adapter merged
    assert isinstance(loaded, cls) and not any("lora" in n for n, _ in loaded.named_parameters())
    assert torch.allclose(block_output(loaded, target), with_adapter, atol=1e-5)
    merged = merge_lora(adapted)
    assert torch.allclose(block_output(merged, target), with_adapter, atol=1e-5)


def test_unknown_lora_modules_are_refused(tmp_path):
    target = tiny_target("llama")
    with pytest.raises(ValueError, match="not modules of this drafter"):
        add_lora(make_drafter(target, 4), config_for(tmp_path, lora_target_modules=["query_key_value"]), None)
    with pytest.raises(ValueError, match="lora_rank"):
        DistillationConfig(target="t", output_dir="o", lora_rank=-1)
    with pytest.raises(ValueError, match="objective"):
        DistillationConfig(target="t", output_dir="o", objective="ppo")


def test_specopd_lora_pipeline_resumes_and_saves_adapter_and_merged_drafter(tmp_path, monkeypatch):
    saved_run_inputs(tmp_path)

    def config(out, steps):
        return DistillationConfig(
            target=str(tmp_path / "target"),
            drafter=str(tmp_path / "drafter"),
            data_file=str(tmp_path / "data.jsonl"),
            data_dir=str(tmp_path / "data"),
            output_dir=str(tmp_path / out),
            objective="specopd",
            lora_rank=4,
            block_size=4,
            num_steps=steps,
            save_every=2,
            batch_size=2,
            anchors_per_sequence=4,
            tree_anchors=2,
            branches=3,
            learning_rate=1e-2,
            dtype="float32",
        )

    whole = run(config("whole", 6))
    original = SpecOPDTrainer.train_step

    def crash_at_step_5(self):
        if self.state["step"] == 4:  # after the checkpoint at step 4
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(SpecOPDTrainer, "train_step", crash_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        run(config("split", 6))
    monkeypatch.setattr(SpecOPDTrainer, "train_step", original)
    resumed = run(config("split", 6))
    log = json.loads((tmp_path / "split" / "training_log.json").read_text())
    assert log["resumed"] and log["steps"] == 6 and log["objective"] == "specopd" and log["supervised_tokens"] > 0
    a, b = load_drafter(whole), load_drafter(resumed)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name
    assert not any("lora" in k for k in a.state_dict())
    base = load_drafter(tmp_path / "drafter")
    assert any(not torch.equal(x, y) for x, y in zip(a.state_dict().values(), base.state_dict().values(), strict=True))
    adapter = load_drafter(Path(tmp_path / "whole" / "adapter"))
    assert all(
        torch.allclose(x, y, atol=1e-6)
        for x, y in zip(adapter.state_dict().values(), a.state_dict().values(), strict=True)
    )


def test_pickled_adapters_are_not_loaded(tmp_path):
    target = tiny_target("llama")
    base = make_drafter(target, 4)
    base.save_pretrained(tmp_path / "base")
    save_adapter(add_lora(base, config_for(tmp_path), str(tmp_path / "base")), tmp_path / "adapter")
    weights = tmp_path / "adapter" / "adapter_model.safetensors"
    torch.save({}, tmp_path / "adapter" / "adapter_model.bin")
    weights.unlink()
    with pytest.raises(ValueError, match="only safetensors"):
        load_drafter(tmp_path / "adapter")
