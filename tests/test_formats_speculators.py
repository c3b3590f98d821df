"""Red Hat speculators' DFlash layout (models/formats/speculators.py): a folder as speculators' converter writes it
(vllm-project/speculators @ c05b95b) reads into a `BlockDrafter` (aux ids - 1 = our taps), drafts as the DFlash
architecture does on the hidden states the aux ids name, and a drafter exports to it and reads back; refusals."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import VOCAB, fed_ids, make_drafter, tiny_target
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoModel, MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel

from hf_specdec import BlockDrafter, BlockDrafterConfig, DecodingSettings, export_drafter, load_drafter
from hf_specdec.models.formats.native_dflash import RENAMED
from hf_specdec.models.target_features import tapped_features

H, HEADS, KV_HEADS, HEAD_DIM, INTER, LAYERS, BLOCK = 64, 4, 2, 16, 96, 1, 5
AUX = [1, 3]  # speculators' ids: the output of target layers 0 and 2
NEW_TOKENS = 24
VERIFIER = "org/tiny-qwen3"
GREEDY = {"accept_tolerance": 0.0, "proposal_type": "greedy", "speculative_tokens": BLOCK - 1, "verifier_accept_k": 1}
# the keys speculators' converter writes at c05b95b (run on a tiny checkpoint), less its `auto_map` (see the module)
CONVERTER_KEYS = {
    "architectures",
    "aux_hidden_state_layer_ids",
    "block_size",
    "draft_vocab_size",
    "dtype",
    "mask_token_id",
    "sample_from_anchor",
    "sliding_window_non_causal",
    "speculators_config",
    "speculators_model_type",
    "speculators_version",
    "target_hidden_size",
    "tie_word_embeddings",
    "transformer_layer_config",
    "transformers_version",
}


def backbone(hidden: int = H, taps: int = len(AUX), seed: int = 3) -> dict[str, torch.Tensor]:
    """Random DFlash backbone tensors (`fc` (H, L*H), `hidden_norm`, `layers.0.*`, `norm`), large enough to vary."""
    config = BlockDrafterConfig(
        hidden_size=hidden,
        intermediate_size=INTER,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        mask_token_id=VOCAB - 1,
        target_layer_ids=list(range(taps)),
    )
    g = torch.Generator().manual_seed(seed)
    state = BlockDrafter(config).state_dict()
    return {name: (1.0 if t.dim() == 1 else 0.0) + 0.3 * torch.randn(t.shape, generator=g) for name, t in state.items()}


def layer_config(hidden: int = H, vocab: int = VOCAB, **changes) -> dict:
    """`transformer_layer_config` as the converter writes it (a Qwen3 config's diff dict)."""
    return {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "intermediate_size": INTER,
        "layer_types": ["full_attention"] * LAYERS,
        "max_position_embeddings": 512,
        "model_type": "qwen3",
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "sliding_window": None,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "vocab_size": vocab,
        **changes,
    }


def speculators_config(aux=AUX, draft_vocab: int = VOCAB, verifier: str = VERIFIER, layer=None, **changes) -> dict:
    return {
        "architectures": ["DFlashDraftModel"],
        "aux_hidden_state_layer_ids": aux,
        "block_size": BLOCK,
        "draft_vocab_size": draft_vocab,
        "dtype": "float32",
        "mask_token_id": VOCAB - 1,
        "sample_from_anchor": False,
        "sliding_window_non_causal": False,
        "speculators_config": {
            "algorithm": "dflash",
            "default_proposal_method": "greedy",
            "proposal_methods": [GREEDY],
            "verifier": {"architectures": ["Qwen3ForCausalLM"], "name_or_path": verifier},
        },
        "speculators_model_type": "dflash",
        "speculators_version": "0.7.0",
        "target_hidden_size": None,
        "tie_word_embeddings": False,
        "transformer_layer_config": layer or layer_config(),
        "transformers_version": "5.24.0",
        **changes,
    }


def write_speculators(folder: Path, config: dict, target, tensors: dict | None = None, ids=None) -> Path:
    """The folder the converter writes: config.json, and model.safetensors with the backbone, the verifier's
    embeddings (V, H) and LM head rows (Vd, H), and `t2d` (V,) / `d2t` (Vd,) for a reduced vocabulary `ids`."""
    hidden = config["transformer_layer_config"]["hidden_size"]
    vocab = config["transformer_layer_config"]["vocab_size"]
    tensors = dict(tensors or backbone(hidden, len(config["aux_hidden_state_layer_ids"])))
    g = torch.Generator().manual_seed(4)
    if hidden == H and vocab == VOCAB:
        embed, head = target.get_input_embeddings().weight.detach(), target.lm_head.weight.detach()
    else:  # a folder built for another target
        embed, head = torch.randn(vocab, hidden, generator=g), torch.randn(vocab, hidden, generator=g)
    tensors["embed_tokens.weight"] = embed.clone()  # (V, H)
    tensors["lm_head.weight"] = head.clone() if ids is None else head[ids].clone()  # (Vd, H)
    if ids is not None:
        t2d = torch.zeros(vocab, dtype=torch.bool)  # (V,) which target ids the drafter scores
        t2d[ids] = True
        tensors |= {"t2d": t2d, "d2t": ids - torch.arange(len(ids))}  # (Vd,) offsets: target id = draft id + d2t
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def reference(tensors: dict) -> MuseGlimmerAssistantModel:
    """transformers' DFlash architecture with these weights (full attention); its taps are set by the caller."""
    config = MuseGlimmerAssistantConfig(
        hidden_size=H,
        intermediate_size=INTER,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        layer_types=["full_attention"] * LAYERS,
        block_size=BLOCK,
        mask_token_id=VOCAB - 1,
        target_layer_ids=[k - 1 for k in AUX],
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = MuseGlimmerAssistantModel(config).eval()
    model.load_state_dict({RENAMED.get(k, k): v for k, v in tensors.items()}, strict=False)
    return model


@pytest.mark.parametrize("verifier_tensors", [False, True])
def test_the_converter_layout_loads_as_a_block_drafter(tmp_path, verifier_tensors):
    target = tiny_target("qwen3")
    tensors = backbone()
    extra = {"verifier_lm_head.weight": torch.randn(VOCAB, H), "verifier_norm.weight": torch.ones(H)}
    folder = write_speculators(tmp_path, speculators_config(), target, tensors | (extra if verifier_tensors else {}))
    drafter = load_drafter(folder)
    cfg = drafter.config
    assert type(drafter) is BlockDrafter and cfg.target_layer_ids == [0, 2]  # aux ids - 1
    again = AutoModel.from_pretrained(folder)  # after import hf_specdec: the same block drafter
    assert type(again) is BlockDrafter and again.config.target_layer_ids == [0, 2]
    assert (cfg.block_size, cfg.mask_token_id, cfg.draft_vocab_size) == (BLOCK, VOCAB - 1, None)
    assert (cfg.target_vocab_size, cfg.target_hidden_size, cfg.target_name_or_path) == (VOCAB, H, VERIFIER)
    assert cfg.target_num_hidden_layers is None  # the layout does not record it; the verifier is no local folder
    assert cfg.rope_parameters["rope_theta"] == 10000.0 and cfg.layer_types == ["full_attention"] * LAYERS
    state = drafter.state_dict()
    assert set(state) == set(tensors) and all(torch.equal(state[name], t) for name, t in tensors.items())


def test_a_config_saved_under_transformers_4_reads_the_same(tmp_path):
    """speculators pins transformers < 5.16: its 4.x serialization (`rope_theta`, `torch_dtype`, keys equal to the
    Qwen3 defaults left out of the layer config) gives the same drafter."""
    target = tiny_target("qwen3")
    layer = layer_config(rope_parameters=None, rope_theta=10000.0, rope_scaling=None, torch_dtype="float32")
    del layer["rope_parameters"], layer["hidden_act"], layer["attention_bias"], layer["rms_norm_eps"]
    older = speculators_config(layer=layer, torch_dtype="float32")
    del older["dtype"]
    a = load_drafter(write_speculators(tmp_path / "older", older, target)).config.to_dict()
    b = load_drafter(write_speculators(tmp_path / "newer", speculators_config(), target)).config.to_dict()
    assert {k: v for k, v in a.items() if k != "_name_or_path"} == {k: v for k, v in b.items() if k != "_name_or_path"}


def test_aux_ids_name_the_hidden_states_the_drafter_reads(tmp_path, prompt):
    """The offset checked against the DFlash architecture: speculators' aux id k is the target's
    `hidden_states[k]` (vLLM's capture at the input of layer k); the loaded drafter, reading its own taps, gives the
    hidden states and drafts transformers' DFlash model gives on exactly those states."""
    target = tiny_target("qwen3")
    tensors = backbone()
    drafter = load_drafter(write_speculators(tmp_path, speculators_config(), target, tensors))
    ref = reference(tensors)
    T = prompt.shape[1]
    with torch.no_grad():
        states = target(prompt, output_hidden_states=True).hidden_states
        theirs = torch.cat([states[k][:, : T - 1] for k in AUX], dim=-1)  # (1, T-1, 2H): aux id k = states[k]
        ours = tapped_features(states, drafter.config.target_layer_ids, T - 1)  # hf_specdec's own reading
        block = torch.cat([prompt[:, -1:], torch.full((1, BLOCK - 1), VOCAB - 1)], dim=1)  # (1, K) anchor + masks
        noise = target.get_input_embeddings()(block)  # (1, K, H)
        positions = torch.arange(T - 1 + BLOCK)[None]
        a = drafter(noise_embeds=noise, target_features=ours, position_ids=positions).last_hidden_state
        b = ref(noise, theirs, position_ids=positions).last_hidden_state
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert torch.equal(target.lm_head(a[:, 1:]).argmax(-1), target.lm_head(b[:, 1:]).argmax(-1))
    assert not torch.equal(theirs, tapped_features(states, AUX, T - 1))  # reading aux ids as taps would differ


def test_greedy_generate_is_plain_greedy_and_drafts_as_the_reference(tmp_path, prompt):
    target = tiny_target("qwen3")
    tensors = backbone()
    drafter = load_drafter(write_speculators(tmp_path, speculators_config(), target, tensors))
    drafter.decoding = DecodingSettings(budget="fixed")
    plain = target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
    ours, ours_fed = fed_ids(target, prompt, assistant_model=drafter)
    native, native_fed = fed_ids(target, prompt, assistant_model=reference(tensors), speculation_type="dflash")
    assert torch.equal(ours, plain) and torch.equal(native, plain)
    full = [ids for ids in ours_fed if len(ids) == BLOCK]
    assert len(full) >= 3 and native_fed[: len(full)] == full and len({tuple(ids[1:]) for ids in full}) > 1


def test_a_reduced_vocabulary_is_read_from_d2t(tmp_path, prompt):
    target = tiny_target("qwen3")
    ids = torch.arange(3, 200, 2)  # (Vd,) sorted target ids
    config = speculators_config(draft_vocab=len(ids))
    drafter = load_drafter(write_speculators(tmp_path, config, target, ids=ids))
    assert drafter.config.draft_vocab_size == len(ids) and torch.equal(drafter.draft_vocab, ids)
    out = target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False))


@pytest.mark.parametrize("reduced", [False, True])
def test_export_writes_the_converter_layout_and_reads_back(tmp_path, prompt, reduced):
    target = tiny_target("qwen3")
    drafter = make_drafter(target, BLOCK, target_layer_ids=[0, 2], target_name_or_path=VERIFIER)
    ids = torch.arange(3, 200, 2)
    if reduced:
        drafter.set_draft_vocab(ids)
    folder = export_drafter(drafter, tmp_path, "speculators", target=target)
    config = json.loads((folder / "config.json").read_text())
    assert set(config) == CONVERTER_KEYS and "model_type" not in config
    assert config["speculators_model_type"] == "dflash" and config["architectures"] == ["DFlashDraftModel"]
    assert config["aux_hidden_state_layer_ids"] == [1, 3] and config["block_size"] == BLOCK
    assert config["draft_vocab_size"] == (len(ids) if reduced else VOCAB) and config["mask_token_id"] == VOCAB - 1
    assert config["speculators_config"] == {
        "algorithm": "dflash",
        "default_proposal_method": "greedy",
        "proposal_methods": [GREEDY],
        "verifier": {"architectures": ["Qwen3ForCausalLM"], "name_or_path": VERIFIER},
    }
    layer = config["transformer_layer_config"]
    assert layer["model_type"] == "qwen3" and (layer["num_hidden_layers"], layer["vocab_size"]) == (1, VOCAB)
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    added = {"embed_tokens.weight", "lm_head.weight"} | ({"t2d", "d2t"} if reduced else set())
    assert set(tensors) == set(drafter.state_dict()) - {"draft_vocab"} | added
    assert torch.equal(tensors["embed_tokens.weight"], target.get_input_embeddings().weight)  # (V, H)
    assert torch.equal(tensors["lm_head.weight"], target.lm_head.weight[ids] if reduced else target.lm_head.weight)
    if reduced:
        assert tensors["t2d"].dtype == torch.bool and tensors["t2d"].sum() == len(ids)
        assert torch.equal(tensors["d2t"] + torch.arange(len(ids)), ids)
    again = load_drafter(folder)
    assert again.config.target_layer_ids == [0, 2] and again.config.target_name_or_path == VERIFIER
    assert all(torch.equal(again.state_dict()[name], t) for name, t in drafter.state_dict().items())
    a = target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, assistant_model=drafter)
    b = target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, assistant_model=again)
    assert torch.equal(a, b) and torch.equal(a, target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False))


def test_script_exports_both_new_layouts_and_checks_the_round_trip(monkeypatch, tmp_path, capsys):
    target = tiny_target("qwen3")
    target.save_pretrained(tmp_path / "target")
    make_drafter(target, BLOCK, target_layer_ids=[0, 2]).save_pretrained(tmp_path / "ours")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "scripts"))
    import export_drafter as script

    def run(*args: str) -> None:
        monkeypatch.setattr(sys, "argv", ["export_drafter.py", "--drafter", str(tmp_path / "ours"), *args])
        script.main()

    with pytest.raises(SystemExit, match="pass --target"):
        run("--output", str(tmp_path / "x"), "--format", "speculators")
    run("--output", str(tmp_path / "spec"), "--format", "speculators", "--target", str(tmp_path / "target"))
    assert "aux_hidden_state_layer_ids [1, 3]" in capsys.readouterr().out
    run("--output", str(tmp_path / "native"), "--format", "native")
    assert "speculation_type='dflash'" in capsys.readouterr().out
    assert json.loads((tmp_path / "native" / "config.json").read_text())["model_type"] == "muse_glimmer_assistant"
    assert load_drafter(tmp_path / "spec").config.target_layer_ids == [0, 2]


@pytest.mark.parametrize(
    "config, hidden, verifier_layers, message",
    [
        (speculators_config(layer=layer_config(vocab=512), draft_vocab=512), H, None, "vocab size 512 != target's 256"),
        (speculators_config(layer=layer_config(hidden=32)), 32, None, "hidden size 32 != target's 64"),
        (speculators_config(), H, 8, "layer count 8 != target's 4"),
    ],
)
def test_a_folder_for_another_target_is_refused_naming_both_sides(
    tmp_path, prompt, config, hidden, verifier_layers, message
):
    target, config = tiny_target("qwen3"), copy.deepcopy(config)
    if verifier_layers is not None:  # a verifier in a local folder: its layer count is known
        (tmp_path / "verifier").mkdir()
        (tmp_path / "verifier" / "config.json").write_text(json.dumps({"num_hidden_layers": verifier_layers}))
        config["speculators_config"]["verifier"]["name_or_path"] = str(tmp_path / "verifier")
    drafter = load_drafter(write_speculators(tmp_path / "drafter", config, target, backbone(hidden)))
    with pytest.raises(ValueError, match=message):
        target.generate(prompt, max_new_tokens=4, do_sample=False, assistant_model=drafter)


@pytest.mark.parametrize(
    "config, message",
    [
        (speculators_config(speculators_model_type="dspark"), "'dspark' checkpoint"),
        (speculators_config(sample_from_anchor=True), "sample_from_anchor"),
        (
            speculators_config(layer=layer_config(layer_types=["sliding_attention"], sliding_window=8)),
            "sliding-window layers",
        ),
        (speculators_config(aux=[0, 3]), "capture the embeddings"),
        (speculators_config(aux=[1, 4]), "include 4, the layer count of the verifier"),
        (speculators_config(mask_token_id=None), "mask_token_id"),
    ],
)
def test_what_the_block_drafter_cannot_draft_is_refused(tmp_path, config, message):
    config = copy.deepcopy(config)
    (tmp_path / "verifier").mkdir()
    (tmp_path / "verifier" / "config.json").write_text(json.dumps({"num_hidden_layers": 4}))
    config["speculators_config"]["verifier"]["name_or_path"] = str(tmp_path / "verifier")
    folder = write_speculators(tmp_path / "drafter", config, tiny_target("qwen3"))
    with pytest.raises(ValueError, match=message):
        load_drafter(folder)


def test_export_refuses_what_the_layout_cannot_hold(tmp_path):
    target = tiny_target("qwen3")
    with pytest.raises(ValueError, match="taps the target's last layer"):  # the converter would drop aux id 4
        export_drafter(
            make_drafter(target, BLOCK, target_layer_ids=[0, 3]), tmp_path / "a", "speculators", target=target
        )
    with pytest.raises(ValueError, match="pass the target"):
        export_drafter(make_drafter(target, BLOCK, target_layer_ids=[0, 2]), tmp_path / "b", "speculators")
    sliding = make_drafter(target, BLOCK, target_layer_ids=[0, 2], layer_types=["sliding_attention"], sliding_window=4)
    with pytest.raises(ValueError, match="sliding-window layers"):
        export_drafter(sliding, tmp_path / "c", "speculators", target=target)
    with pytest.raises(ValueError, match="verifier_name_or_path"):  # a target built from a config has no name
        export_drafter(
            make_drafter(target, BLOCK, target_layer_ids=[0, 2]), tmp_path / "d", "speculators", target=target
        )
    assert not any(tmp_path.iterdir())
