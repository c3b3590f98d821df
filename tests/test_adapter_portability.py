"""LoRA adapters load from anywhere: from another working directory, after the run folder moved to another
machine, from the Hub; a base that is nowhere is named with the fix; the adapter folder carries our card."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import MASK_ID, make_drafter, tiny_target
from huggingface_hub import HfApi, hf_hub_download
from peft import LoraConfig, get_peft_model
from test_hub import TARGET, hub_env, local_hub  # noqa: F401 (fixtures)
from test_pard import tiny_lm

from hf_specdec import PardDrafter, load_drafter
from hf_specdec.hub import publish_drafter, write_adapter_card
from hf_specdec.models.base_models import resolve_base_model
from hf_specdec.models.loading import load_adapter
from hf_specdec.training.config import DistillationConfig
from hf_specdec.training.lora import add_lora, save_adapter


def trained_adapter(base_name: str, base, out: Path, seed: int = 0):
    """A non-zero LoRA adapter over `base` saved to `out` with `base_name` recorded; returns the merged drafter."""
    adapted = add_lora(base, DistillationConfig(target="t", output_dir=str(out.parent), lora_rank=4), base_name)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in base.named_parameters():
            if "lora_B" in name:  # peft starts B at zero: make the adapter matter
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    save_adapter(adapted, out)
    return adapted.merge_and_unload()


def same_weights(a, b) -> bool:
    return all(
        torch.allclose(x, y, atol=1e-6) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def test_an_adapter_recorded_relative_to_where_training_ran_loads_from_elsewhere(tmp_path, monkeypatch):
    """What runs recorded before: the base relative to the working directory of training (runs/b8/drafter)."""
    work = tmp_path / "work"
    base = make_drafter(tiny_target("llama"), 4).float()
    base.save_pretrained(work / "runs" / "b8" / "drafter")
    monkeypatch.chdir(work)
    merged = trained_adapter("runs/b8/drafter", base, work / "runs" / "b8-lora" / "adapter")
    monkeypatch.chdir(tmp_path)  # another working directory
    loaded = load_drafter(work / "runs" / "b8-lora" / "adapter")
    assert same_weights(loaded, merged) and not any("lora" in n for n in loaded.state_dict())


def test_an_adapter_recorded_relative_to_its_folder_loads_after_the_runs_moved(tmp_path, monkeypatch):
    base = make_drafter(tiny_target("llama"), 4).float()
    base.save_pretrained(tmp_path / "a" / "runs" / "b8" / "drafter")
    merged = trained_adapter("../../b8/drafter", base, tmp_path / "a" / "runs" / "b8-lora" / "adapter")
    shutil.move(tmp_path / "a" / "runs", tmp_path / "other-machine")
    monkeypatch.chdir(tmp_path / "other-machine" / "b8")
    assert same_weights(load_drafter(tmp_path / "other-machine" / "b8-lora" / "adapter"), merged)


def test_a_missing_base_is_named_with_the_fix(tmp_path, monkeypatch):
    base = make_drafter(tiny_target("llama"), 4).float()
    base.save_pretrained(tmp_path / "base")
    trained_adapter("../gone/drafter", base, tmp_path / "adapter")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"'../gone/drafter' of the LoRA adapter .* is not there .*base=drafter"):
        load_drafter(tmp_path / "adapter")
    trained_adapter("runs/nowhere", base, tmp_path / "adapter2")  # could be a Hub id: tried there, then explained
    with pytest.raises(ValueError, match=r"neither a folder .* nor a loadable Hub repo"):
        load_drafter(tmp_path / "adapter2")
    fixed = load_adapter(tmp_path / "adapter2", base=load_drafter(tmp_path / "base"))  # the fix the message names
    assert not any("lora" in n for n in fixed.state_dict())


@pytest.mark.usefixtures("hub_env")
def test_an_adapter_on_the_hub_loads_over_its_base_on_the_hub(tmp_path, monkeypatch):
    target = tiny_target("llama")
    target.config._name_or_path = TARGET
    base = make_drafter(target, 4).float()
    base.save_pretrained(tmp_path / "base")
    publish_drafter(tmp_path / "base", "org/base-drafter", target_id=TARGET)
    merged = trained_adapter("org/base-drafter", base, tmp_path / "adapter")
    write_adapter_card(tmp_path / "adapter")
    HfApi().create_repo("org/base-drafter-lora")
    HfApi().upload_folder(repo_id="org/base-drafter-lora", folder_path=tmp_path / "adapter")
    monkeypatch.chdir(tmp_path / "..")
    shutil.rmtree(tmp_path / "base")  # nothing local: the base comes from the Hub too
    assert same_weights(load_drafter("org/base-drafter-lora"), merged)


def test_the_adapter_card_says_what_it_is_its_base_and_how_to_load_it(tmp_path):
    base = make_drafter(tiny_target("llama"), 4).float()
    base.save_pretrained(tmp_path / "drafter")
    trained_adapter("../drafter", base, tmp_path / "adapter")
    assert "## Model Details" in (tmp_path / "adapter" / "README.md").read_text()  # peft's empty template
    card = write_adapter_card(tmp_path / "adapter").read_text()
    assert "LoRA adapter (rank 4) over the hf_specdec drafter `../drafter`" in card
    assert 'hf_specdec.load_drafter("path/to/this/folder"' in card and "import hf_specdec" in card
    assert "## Model Details" not in card
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["r"] == 4


def test_a_pard_base_lm_is_found_on_another_machine(tmp_path, monkeypatch):
    """A PARD config names its base LM: an offline model's folder of the saving machine, or a folder relative to
    where training ran; both are found here."""
    monkeypatch.setenv("HF_SPECDEC_MODELS", str(tmp_path / "models"))
    (tmp_path / "models" / "tiny-lm").mkdir(parents=True)
    (tmp_path / "models" / "tiny-lm" / "config.json").write_text("{}")
    elsewhere = "/home/someone/.cache/hf_specdec/models/tiny-lm"
    assert resolve_base_model(elsewhere, relative_to=tmp_path / "runs" / "x" / "adapter") == str(
        tmp_path / "models" / "tiny-lm"
    )
    (tmp_path / "work" / "lms" / "lm").mkdir(parents=True)
    (tmp_path / "work" / "lms" / "lm" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    found = resolve_base_model("lms/lm", relative_to=tmp_path / "work" / "runs" / "x" / "adapter")
    assert found == str(tmp_path / "work" / "lms" / "lm")


@pytest.mark.usefixtures("hub_env")
def test_a_pard_adapter_publishes_without_local_paths_and_loads_back_from_the_hub(tmp_path, monkeypatch):
    """A PARD drafter saved as its config + adapter over an offline model: published with the base named by its
    offline model name, then loaded by repo id on a machine that has built that offline model."""
    monkeypatch.setenv("HF_SPECDEC_MODELS", str(tmp_path / "models"))
    target = tiny_target("llama")
    lm = tiny_lm()
    lm.save_pretrained(tmp_path / "models" / "tiny-lm")
    drafter = PardDrafter.from_causal_lm(lm, target, mask_token_id=MASK_ID, block_size=4)
    drafter.config.base_model = str(tmp_path / "models" / "tiny-lm")  # as a run that named the folder records it
    drafter.config.target_name_or_path = str(tmp_path / "target")
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(drafter, lora)
    peft_model.save_pretrained(tmp_path / "adapter")
    merged = peft_model.merge_and_unload()
    merged.save_adapter_folder(tmp_path / "adapter")
    publish_drafter(tmp_path / "adapter", "org/tiny-pard", target_id=TARGET)
    config = json.loads(Path(hf_hub_download("org/tiny-pard", "config.json")).read_text())
    assert config["base_model"] == "tiny-lm" and config["target_name_or_path"] == TARGET
    assert str(tmp_path) not in json.dumps(config)
    monkeypatch.chdir(tmp_path / "..")
    loaded = load_drafter("org/tiny-pard")
    assert isinstance(loaded, PardDrafter) and same_weights(loaded, merged)
