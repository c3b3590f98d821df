"""A clean run prints no deprecation warning: loading a drafter (a full folder, a LoRA adapter folder), putting LoRA
on one for training and a short drafted generate() emit no FutureWarning or DeprecationWarning.

peft builds a `PeftModel` by reading `model.is_gradient_checkpointing`, a deprecated transformers alias that warns on
every access; hf_specdec's peft calls filter exactly that message (`hf_specdec/models/peft_probe.py`).
"""

from __future__ import annotations

import warnings

import torch
from conftest import MASK_ID, make_drafter, tiny_target
from test_pard import tiny_lm

import hf_specdec
from hf_specdec import DecodingSettings, PardDrafter
from hf_specdec.training.config import DistillationConfig
from hf_specdec.training.lora import add_lora, save_adapter

DEPRECATIONS = (FutureWarning, DeprecationWarning, PendingDeprecationWarning)


def deprecations(caught: list[warnings.WarningMessage]) -> list[str]:
    return [
        f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})"
        for w in caught
        if issubclass(w.category, DEPRECATIONS)
    ]


def test_loading_drafters_and_a_drafted_generate_warn_of_no_deprecation(tmp_path):
    target = tiny_target("llama")
    prompt = torch.randint(3, 250, (1, 10), generator=torch.Generator().manual_seed(2))
    block = make_drafter(target, 4)
    block.save_pretrained(tmp_path / "block")
    lm = tiny_lm()
    lm.save_pretrained(tmp_path / "lm")
    pard = PardDrafter.from_causal_lm(lm, target, mask_token_id=MASK_ID, block_size=4, base_model=str(tmp_path / "lm"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every occurrence, not once per place
        lora = DistillationConfig(target="t", output_dir=str(tmp_path), lora_rank=4)
        save_adapter(add_lora(block, lora, str(tmp_path / "block")), tmp_path / "block-adapter")  # LoRA for training
        adapted = add_lora(pard, lora, None)
        adapted.save_pretrained(tmp_path / "pard-adapter")
        adapted.merge_and_unload().save_adapter_folder(tmp_path / "pard-adapter")
        # a full folder, and LoRA adapter folders over a block drafter and over a causal LM (PARD)
        folders = ("block", "block-adapter", "pard-adapter")
        drafters = [hf_specdec.load_drafter(tmp_path / folder) for folder in folders]
        plain = target.generate(prompt, max_new_tokens=8, do_sample=False)
        for drafter in drafters:
            for settings in (DecodingSettings(), DecodingSettings(budget="fixed", sampled_drafts="argmax")):
                drafter.decoding = settings  # hf_specdec's loop, then transformers' assisted loop
                out = target.generate(prompt, max_new_tokens=8, do_sample=False, assistant_model=drafter.eval())
                assert torch.equal(out, plain)
    assert isinstance(drafters[2], PardDrafter)
    assert deprecations(caught) == []
