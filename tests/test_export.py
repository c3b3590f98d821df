"""`export_dflash` writes a drafter in the published DFlash layout, exactly the config fields and tensor names that
z-lab's checkpoints have and that vLLM's and SGLang's DFlash loaders read, and `load_drafter` reads it back into
a drafter with identical outputs: same hidden states, logits and drafts, same `generate()` output and acceptance.

Names the serving stacks read (sources in `hf_specdec/models/formats/dflash.py`): vLLM
`DFlashQwen3Model` loads `fc`, `hidden_norm`, `norm` and `layers.N.{self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
mlp.{gate,up,down}_proj, input_layernorm, post_attention_layernorm}` (prefixing `model.`), plus `d2t` and `lm_head`
for a reduced vocabulary (`t2d` skipped); SGLang `DFlashDraftModel` loads the same backbone names and ignores the rest.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
import torch
from conftest import MASK_ID, VOCAB, make_drafter, tiny_target
from safetensors import safe_open
from transformers import AutoConfig, Qwen3Config

from hf_specdec import BlockDrafter, DBLASTDrafter, DCOCODrafter, load_drafter
from hf_specdec.models.formats.dflash import export_dflash

# Top-level keys of a z-lab DFlash config.json (SpecForge `configs/qwen3-8b-dflash.json` schema), less `auto_map`:
# the export ships no remote code.
ZLAB_CONFIG_KEYS = {
    "architectures",
    "model_type",
    "block_size",
    "dflash_config",
    "num_target_layers",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "rms_norm_eps",
    "attention_bias",
    "attention_dropout",
    "max_position_embeddings",
    "rope_theta",
    "rope_scaling",
    "vocab_size",
    "tie_word_embeddings",
    "layer_types",
    "torch_dtype",
}
LAYER_TENSORS = [
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "self_attn.q_norm",
    "self_attn.k_norm",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
    "input_layernorm",
    "post_attention_layernorm",
]
SUBSET = torch.arange(3, VOCAB, 3)  # a reduced draft vocabulary: every third id


def dflash_names(layers: int) -> set[str]:
    backbone = {"fc.weight", "hidden_norm.weight", "norm.weight"}
    return backbone | {f"layers.{i}.{t}.weight" for i in range(layers) for t in LAYER_TENSORS}


def randomized(drafter: BlockDrafter, seed: int = 7) -> BlockDrafter:
    """Every weight non-trivial (norms too), so an equivalence test cannot pass by symmetry."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            base = 1.0 if name.endswith("norm.weight") else 0.0
            p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))
    return drafter


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def drafter_outputs(drafter: BlockDrafter, target) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hidden states, logits over the drafter's vocabulary and greedy drafts of one block on random features."""
    g = torch.Generator().manual_seed(3)
    C, S, H = 9, drafter.config.block_size, drafter.config.hidden_size
    features = torch.randn(1, C, len(drafter.config.target_layer_ids) * H, generator=g)
    block = torch.full((1, S), MASK_ID)
    block[0, 0] = 17
    with torch.no_grad():
        hidden = drafter(
            noise_embeds=target.get_input_embeddings()(block),
            target_features=features,
            position_ids=torch.arange(C + S)[None],
        ).last_hidden_state  # (1, S, H)
        logits = hidden[0, 1:] @ drafter.head_weight(target.get_output_embeddings()).T  # (S - 1, Vd)
    ids = logits.argmax(-1) if drafter.draft_vocab is None else drafter.draft_vocab[logits.argmax(-1)]
    return hidden, logits, ids


def assert_same_drafting(original: BlockDrafter, again: BlockDrafter, target, prompt) -> None:
    for ours, theirs in zip(drafter_outputs(original, target), drafter_outputs(again, target), strict=True):
        assert torch.equal(ours, theirs)
    outs, stats = [], []
    for drafter in (original, again):
        drafter.decoding = {**drafter.decoding.to_dict(), "budget": "fixed"}  # the budget's choices follow timings
        outs.append(target.generate(prompt, do_sample=False, max_new_tokens=24, assistant_model=drafter))
        stats.append(drafter.last_acceptance_stats.to_dict())
    assert torch.equal(outs[0], outs[1]) and stats[0] == stats[1]  # same drafts, step by step
    assert torch.equal(outs[0], target.generate(prompt, do_sample=False, max_new_tokens=24))


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_export_is_the_dflash_layout_and_reimports_identically(arch, prompt, tmp_path):
    target = tiny_target(arch)
    drafter = randomized(make_drafter(target, 5, num_hidden_layers=2))
    export_dflash(drafter, tmp_path)

    config = json.loads((tmp_path / "config.json").read_text())
    assert set(config) == ZLAB_CONFIG_KEYS
    assert config["architectures"] == ["DFlashDraftModel"] and config["model_type"] == "qwen3"
    assert config["dflash_config"] == {"mask_token_id": MASK_ID, "target_layer_ids": drafter.config.target_layer_ids}
    assert config["block_size"] == 5 and config["num_target_layers"] == 4 and config["vocab_size"] == VOCAB
    assert config["layer_types"] == ["full_attention"] * 2 and "eagle_aux_hidden_state_layer_ids" not in config
    assert set(tensors(tmp_path)) == dflash_names(2)

    hf = AutoConfig.from_pretrained(tmp_path)  # what vLLM and SGLang build their config from
    assert type(hf) is Qwen3Config and hf.rope_parameters == drafter.config.rope_parameters

    again = load_drafter(tmp_path).eval()
    assert type(again) is BlockDrafter
    assert again.config.block_size == 5 and again.config.target_layer_ids == drafter.config.target_layer_ids
    assert again.state_dict().keys() == drafter.state_dict().keys()
    assert_same_drafting(drafter, again, target, prompt)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"attention_bias": True}, {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5}}],
)
def test_export_of_an_import_is_byte_identical(overrides, tmp_path):
    drafter = randomized(make_drafter(tiny_target("qwen3"), 4, **overrides))
    export_dflash(drafter, tmp_path / "a")
    again = BlockDrafter.from_pretrained(tmp_path / "a")
    assert again.config.attention_bias == drafter.config.attention_bias
    assert again.config.rope_parameters == drafter.config.rope_parameters
    assert AutoConfig.from_pretrained(tmp_path / "a").rope_parameters == drafter.config.rope_parameters
    export_dflash(again, tmp_path / "b")
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_draft_vocabulary_is_exported_as_vllm_reads_it(prompt, tmp_path):
    target = tiny_target("qwen3")
    drafter = randomized(make_drafter(target, 6))
    drafter.set_draft_vocab(SUBSET)
    export_dflash(drafter, tmp_path, target=target)

    config = json.loads((tmp_path / "config.json").read_text())
    assert config["draft_vocab_size"] == len(SUBSET) and config["vocab_size"] == VOCAB
    weights = tensors(tmp_path)
    assert set(weights) == dflash_names(1) | {"d2t", "t2d", "lm_head.weight"}
    assert torch.equal(torch.arange(len(SUBSET)) + weights["d2t"], SUBSET)  # vLLM: target id = draft id + d2t
    assert weights["t2d"].dtype == torch.bool and torch.equal(weights["t2d"].nonzero()[:, 0], SUBSET)
    assert torch.equal(weights["lm_head.weight"], target.get_output_embeddings().weight[SUBSET])

    again = load_drafter(tmp_path).eval()
    assert again.config.draft_vocab_size == len(SUBSET) and torch.equal(again.draft_vocab, SUBSET)
    assert_same_drafting(drafter, again, target, prompt)


def test_draft_vocabulary_without_the_target_is_refused(tmp_path):
    drafter = make_drafter(tiny_target("qwen3"), 4)
    drafter.set_draft_vocab(SUBSET)
    with pytest.raises(ValueError, match="pass the target"):
        export_dflash(drafter, tmp_path)


@pytest.mark.parametrize("cls", [DCOCODrafter, DBLASTDrafter])
def test_heads_are_dropped_with_a_warning_and_the_backbone_exported(cls, tmp_path, caplog):
    target = tiny_target("qwen3")
    drafter = randomized(make_drafter(target, 4, cls=cls))
    with caplog.at_level(logging.WARNING):
        export_dflash(drafter, tmp_path)
    assert "only the block backbone" in caplog.text
    assert set(tensors(tmp_path)) == dflash_names(1)
    backbone = load_drafter(tmp_path).eval()
    assert type(backbone) is BlockDrafter
    state = drafter.state_dict()
    assert all(torch.equal(t, state[name]) for name, t in backbone.state_dict().items())


def test_non_drafters_are_refused(tmp_path):
    with pytest.raises(TypeError, match="only block drafters"):
        export_dflash(tiny_target("qwen3"), tmp_path)


def run_script(monkeypatch, *args: str) -> None:
    scripts = Path(__file__).resolve().parents[1] / "scripts"
    monkeypatch.syspath_prepend(str(scripts))
    monkeypatch.setattr(sys, "argv", ["export_drafter.py", *args])
    import export_drafter

    export_drafter.main()


def saved_target_and_drafter(tmp_path) -> None:
    """tmp_path/target: a tiny Qwen3; tmp_path/ours: a randomized block drafter for it with the SUBSET vocabulary."""
    target = tiny_target("qwen3")
    target.save_pretrained(tmp_path / "target")
    drafter = randomized(make_drafter(target, 4))
    drafter.set_draft_vocab(SUBSET)
    drafter.save_pretrained(tmp_path / "ours")


def test_script_exports_and_checks_the_round_trip(monkeypatch, tmp_path, capsys):
    saved_target_and_drafter(tmp_path)
    with pytest.raises(SystemExit, match="pass --target"):
        run_script(monkeypatch, "--drafter", str(tmp_path / "ours"), "--output", str(tmp_path / "x"))
    run_script(
        monkeypatch,
        "--drafter",
        str(tmp_path / "ours"),
        "--output",
        str(tmp_path / "out"),
        "--target",
        str(tmp_path / "target"),
    )
    assert "num_speculative_tokens 3" in capsys.readouterr().out
    assert torch.equal(load_drafter(tmp_path / "out").draft_vocab, SUBSET)
    with pytest.raises(SystemExit, match="not empty"):
        run_script(monkeypatch, "--drafter", str(tmp_path / "ours"), "--output", str(tmp_path / "out"))
    with pytest.raises(SystemExit, match="not a block drafter"):
        run_script(monkeypatch, "--drafter", str(tmp_path / "target"), "--output", str(tmp_path / "y"))


def test_script_self_check_shows_no_expected_load_report(monkeypatch, tmp_path):
    """The reload that proves an export does not print transformers' MISSING/UNEXPECTED report; a plain load does."""
    from transformers.utils import logging as transformers_logging

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    transformers_logging.add_handler(handler)
    try:
        saved_target_and_drafter(tmp_path)
        before = transformers_logging.get_verbosity()
        run_script(
            monkeypatch,
            "--drafter",
            str(tmp_path / "ours"),
            "--output",
            str(tmp_path / "out"),
            "--target",
            str(tmp_path / "target"),
        )
        assert transformers_logging.get_verbosity() == before
        assert not [r for r in records if "LOAD REPORT" in r.getMessage()]
        BlockDrafter.from_pretrained(tmp_path / "out")
        assert any("MISSING" in r.getMessage() for r in records)
    finally:
        transformers_logging.remove_handler(handler)
