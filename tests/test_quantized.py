"""Targets loaded in 8-bit and 4-bit with bitsandbytes (its CPU backend here): every drafter kind, chains, trees and
batches give exactly the quantized target's own greedy output."""

import pytest
import torch
from conftest import DEVICES, OracleDrafter, make_drafter, oracle, tiny_target

from hf_specdec import DBLASTDrafter, DCOCODrafter, DecodingSettings

bnb = pytest.importorskip("bitsandbytes")
from transformers import AutoModelForCausalLM, BitsAndBytesConfig  # noqa: E402

QUANT = {
    "8bit": BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0),  # see test_outlier_threshold_warning
    "4bit": BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float32, bnb_4bit_quant_type="nf4"),
}


@pytest.fixture(scope="module", params=[(q, d) for q in QUANT for d in DEVICES], ids="-".join)
def quantized(request, tmp_path_factory):
    """The tiny target in 8-bit or 4-bit on each device present (bitsandbytes' CPU or CUDA kernels)."""
    quant, device = request.param
    folder = tmp_path_factory.mktemp("target")
    tiny_target("llama").save_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, quantization_config=QUANT[quant], device_map=device)
    assert any(type(m).__module__.startswith("bitsandbytes") for m in model.modules())
    return model.eval()


@pytest.mark.parametrize("kind", [None, DCOCODrafter, DBLASTDrafter])
@pytest.mark.parametrize("settings", [DecodingSettings(), DecodingSettings(tree_budget=5)], ids=["chain", "tree"])
def test_every_drafter_kind_on_a_quantized_target(quantized, kind, settings):
    prompt = torch.randint(3, 250, (1, 10), generator=torch.Generator().manual_seed(4)).to(quantized.device)
    expected = quantized.generate(prompt, max_new_tokens=16, do_sample=False)
    drafter = make_drafter(quantized, 4, **({"cls": kind} if kind else {})).float()
    drafter.decoding = settings
    out = quantized.generate(prompt, max_new_tokens=16, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("corrupt_at", [0, 2, None])
def test_oracle_drafts_accepted_none_some_all_on_a_quantized_target(quantized, corrupt_at):
    prompt = torch.randint(3, 250, (1, 10), generator=torch.Generator().manual_seed(6)).to(quantized.device)
    expected = quantized.generate(prompt, max_new_tokens=16, do_sample=False)
    drafter = oracle(quantized, prompt, 4, corrupt_at, 16, cls=OracleDrafter)
    out = quantized.generate(prompt, max_new_tokens=16, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, expected)
    if corrupt_at is None:
        assert drafter.last_acceptance_stats.tau > 3.0


def test_batch_on_a_quantized_target(quantized):
    g = torch.Generator().manual_seed(8)
    ids = torch.randint(3, 250, (3, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    ids[1, :4] = 0
    ids, mask = ids.to(quantized.device), mask.to(quantized.device)
    expected = quantized.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    out = quantized.generate(
        ids, attention_mask=mask, max_new_tokens=12, do_sample=False, assistant_model=make_drafter(quantized, 4)
    )
    assert torch.equal(out, expected)


def test_outlier_threshold_warning(tmp_path, caplog):
    """Default LLM.int8 (threshold 6) makes a token's logits depend on the other tokens of its forward: said once."""
    tiny_target("llama").save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(
        tmp_path, quantization_config=BitsAndBytesConfig(load_in_8bit=True), device_map="cpu"
    )
    drafter = make_drafter(model, 4).float()
    prompt = torch.randint(3, 250, (1, 8), generator=torch.Generator().manual_seed(1))
    with caplog.at_level("WARNING", logger="hf_specdec.decoding.validation"):
        model.generate(prompt, max_new_tokens=3, do_sample=False, assistant_model=drafter)
        model.generate(prompt, max_new_tokens=3, do_sample=False, assistant_model=drafter)
    said = [r for r in caplog.records if "llm_int8_threshold" in r.getMessage()]
    assert len(said) == 1


def test_specopd_lora_training_with_a_4bit_target(tmp_path, device):
    """The frozen target of a training run may be loaded in 4-bit: SpecOPD + LoRA runs and saves a drafter."""
    from conftest import saved_run_inputs

    from hf_specdec import load_drafter
    from hf_specdec.training.config import DistillationConfig
    from hf_specdec.training.run import run as run_training

    saved_run_inputs(tmp_path)
    config = DistillationConfig(
        target=str(tmp_path / "target"),
        drafter=str(tmp_path / "drafter"),
        data_file=str(tmp_path / "data.jsonl"),
        output_dir=str(tmp_path / "run"),
        target_quantization="4bit",
        objective="specopd",
        lora_rank=4,
        block_size=4,
        num_steps=2,
        batch_size=2,
        anchors_per_sequence=4,
        tree_anchors=2,
        dtype="float32",
        device=device.type,
    )
    out = run_training(config)
    assert type(load_drafter(out)).__name__ == "BlockDrafter"
    with pytest.raises(ValueError, match="target_quantization"):
        DistillationConfig(target="t", output_dir="o", target_quantization="3bit")
