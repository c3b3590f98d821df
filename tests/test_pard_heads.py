"""Heads on a PARD drafter: DCOCO's corrector (`PardDCOCODrafter`) and DBLAST's mixture (`PardDBLASTDrafter`).

Contracts: greedy output equals plain greedy with drafts that are all, none or exactly j accepted (chain, tree,
lookup branch), also with a trained-looking (random) head, in batches and the server; a fresh mixture head drafts
exactly as the PARD drafter under it; the states a head reads are the same in decoding and in training's packed
pass; full weights and a head saved alone (over a PARD drafter named as its backbone) load back through
`load_drafter` / `AutoModel`; a corrector and a mixture head train on a PARD drafter and save a loadable head.
(Sampling with either head: tests/test_sampling_distribution.py.)
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import (
    MASK_ID,
    VOCAB,
    OracleReference,
    OracleScores,
    assert_batch_and_server_equal_plain,
    saved_run_inputs,
)
from safetensors.torch import load_file
from test_pard import tiny_lm
from transformers import AutoModel, GenerationConfig

import hf_specdec
from hf_specdec import (
    DecodingSettings,
    PardDBLASTCandidateGenerator,
    PardDBLASTConfig,
    PardDBLASTDrafter,
    PardDCOCOCandidateGenerator,
    PardDCOCOConfig,
    PardDCOCODrafter,
    PardDrafter,
)
from hf_specdec.training.config import CorrectorTrainingConfig, MixtureTrainingConfig
from hf_specdec.training.data import TrainingSequence
from hf_specdec.training.pard_layout import block_states
from hf_specdec.training.run import run

NEW_TOKENS = 21


class OraclePardDCOCOGenerator(OracleScores, PardDCOCOCandidateGenerator):
    pass


class OraclePardDCOCODrafter(OracleReference, PardDCOCODrafter):
    pass


class OraclePardDBLASTGenerator(OracleScores, PardDBLASTCandidateGenerator):
    pass


class OraclePardDBLASTDrafter(OracleReference, PardDBLASTDrafter):
    pass


hf_specdec.register_drafter_kind(OraclePardDCOCODrafter, OraclePardDCOCOGenerator, config_class=PardDCOCOConfig)
hf_specdec.register_drafter_kind(OraclePardDBLASTDrafter, OraclePardDBLASTGenerator, config_class=PardDBLASTConfig)


def pard(target, block_size=5) -> PardDrafter:
    return PardDrafter.from_causal_lm(tiny_lm().to(target.device), target, mask_token_id=MASK_ID, block_size=block_size)


def with_head(kind, target, block_size=5, random_head=False, cls=None):
    """A PARD drafter with a DCOCO corrector or a DBLAST mixture head (random: transitions / offsets that matter)."""
    base = pard(target, block_size)
    if kind == "dcoco":
        drafter = (cls or PardDCOCODrafter).from_pard(base, corrector_candidates=8)
        if random_head:
            torch.manual_seed(3)
            torch.nn.init.normal_(drafter.corrector.scorer_out.weight, std=2.0)
    else:
        drafter = (cls or PardDBLASTDrafter).from_pard(base, mixture_components=3, mixture_rank=4)
        if random_head:
            torch.manual_seed(3)
            torch.nn.init.normal_(drafter.mixture_head.up.weight, std=2.0)
    drafter.decoding = DecodingSettings(budget="fixed")
    return drafter.eval()


SETTINGS = {
    "chain": DecodingSettings(budget="fixed"),
    "tree": DecodingSettings(budget="fixed", tree_budget=8, tree_topk=2),
    "chain + lookup": DecodingSettings(budget="fixed", prompt_lookup_tokens=3),
}
ORACLES = {"dcoco": OraclePardDCOCODrafter, "dblast": OraclePardDBLASTDrafter}


@pytest.mark.parametrize("kind", ["dcoco", "dblast"])
@pytest.mark.parametrize("name", list(SETTINGS))
@pytest.mark.parametrize("accept", ["none", "all", "j"])
def test_oracle_heads_give_plain_greedy_output_accepting_none_all_or_j(target, prompt, kind, name, accept):
    block_size = 5
    j = {"none": 0, "all": None, "j": 2}[accept]
    drafter = with_head(kind, target, block_size, cls=ORACLES[kind])
    drafter.reference = target.generate(
        prompt, max_new_tokens=NEW_TOKENS + block_size, do_sample=False, eos_token_id=None
    )
    drafter.corrupt_at = j
    drafter.reference_rank = 50  # beyond the corrector's 8 candidates: the right token is never drafted there
    drafter.decoding = SETTINGS[name]
    plain = target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None)
    out = target.generate(
        prompt, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, assistant_model=drafter
    )
    assert torch.equal(out, plain)
    accepted = drafter.last_acceptance_stats.accepted[:-1]  # the last step is cut by max_new_tokens
    expected = block_size - 1 if j is None else j
    assert accepted and all(a >= expected if "lookup" in name else a == expected for a in accepted)


@pytest.mark.parametrize("kind", ["dcoco", "dblast"])
def test_random_heads_keep_greedy_output_in_every_loop(target, prompt, kind):
    drafter = with_head(kind, target, random_head=True)
    plain = target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
    for settings in [*SETTINGS.values(), DecodingSettings()]:  # the adaptive budget too
        drafter.decoding = settings
        out = target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, assistant_model=drafter)
        assert torch.equal(out, plain), settings
    g = torch.Generator().manual_seed(9)
    prompts = [torch.randint(3, VOCAB - 1, (n,), generator=g) for n in (9, 14)]
    drafter.decoding = DecodingSettings(budget="fixed", tree_budget=4, tree_topk=2)
    assert_batch_and_server_equal_plain(target, drafter, prompts, new_tokens=12)


def test_a_fresh_mixture_head_drafts_exactly_as_its_pard_drafter(target, prompt):
    base = pard(target)
    base.decoding = DecodingSettings(budget="fixed", tree_budget=6, tree_topk=2)
    drafter = PardDBLASTDrafter.from_pard(base, mixture_components=3, mixture_rank=4).eval()
    ref = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=base)
    out = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=drafter)
    assert torch.equal(out, ref)
    assert drafter.last_acceptance_stats.accepted == base.last_acceptance_stats.accepted


def test_training_reads_the_states_decoding_gives_the_head(target, prompt):
    """`pard_layout.block_states` (one packed pass over many anchors) equals, anchor by anchor, what the candidate
    generator hands a head in decoding (`block_states`), so a head is trained on what it will see."""
    drafter = with_head("dcoco", target, block_size=5)
    ids = torch.cat([prompt[0], torch.arange(20, 40)])  # (T,)
    T, k = ids.shape[0], drafter.config.block_size - 1
    seq = TrainingSequence(ids=ids, features=torch.zeros(T, 1), loss_start=1)
    anchors = torch.tensor([3, 10, T - 3])
    with torch.no_grad():
        packed = block_states(drafter, seq, anchors, target.device)  # (n, K, H)
        for i, a in enumerate(anchors.tolist()):
            gen = PardDCOCOCandidateGenerator(drafter, target, GenerationConfig(max_length=T + 10))
            hidden, _ = gen.block_states(ids[None, : a + 1], k)  # (k + 1, H)
            torch.testing.assert_close(packed[i], hidden, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", ["dcoco", "dblast"])
def test_full_weights_and_a_head_saved_alone_load_back(target, prompt, tmp_path, kind):
    drafter = with_head(kind, target, random_head=True)
    drafter.decoding = DecodingSettings(budget="fixed", tree_budget=5, tree_topk=2)
    drafter.save_pretrained(tmp_path / "full")
    base = PardDrafter.from_causal_lm(drafter.lm, target, mask_token_id=MASK_ID, block_size=5)
    base.save_pretrained(tmp_path / "pard")
    drafter.save_head_folder(tmp_path / "head", backbone="../pard")
    files = sorted(p.name for p in (tmp_path / "head").iterdir())
    assert files == ["config.json", "head.safetensors"]  # the head alone: no copy of the LM
    expected = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=drafter)
    for loaded in (AutoModel.from_pretrained(tmp_path / "full"), hf_specdec.load_drafter(tmp_path / "head")):
        assert type(loaded) is type(drafter) and loaded.decoding == drafter.decoding
        for name, tensor in drafter.state_dict().items():
            assert torch.equal(tensor, loaded.state_dict()[name]), name
        out = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=loaded.eval())
        assert torch.equal(out, expected)


def test_a_head_folder_whose_backbone_is_missing_says_so(target, tmp_path):
    drafter = with_head("dcoco", target)
    drafter.save_head_folder(tmp_path / "head", backbone="../nowhere")
    with pytest.raises(OSError, match="nowhere"):
        hf_specdec.load_drafter(tmp_path / "head")


def test_bad_head_shapes_are_refused(target):
    with pytest.raises(ValueError, match="corrector_candidates"):
        PardDCOCODrafter.from_pard(pard(target), corrector_candidates=0)
    with pytest.raises(ValueError, match="mixture_components"):
        PardDBLASTDrafter.from_pard(pard(target), mixture_components=0)


@pytest.mark.parametrize("kind", ["dcoco", "dblast"])
def test_a_head_trains_on_a_pard_drafter_and_saves_a_loadable_head(tmp_path, kind):
    target = saved_run_inputs(tmp_path, sequences=4)
    pard(target).save_pretrained(tmp_path / "pard")
    head_config = CorrectorTrainingConfig if kind == "dcoco" else MixtureTrainingConfig
    shape = (
        {"corrector_candidates": 64} if kind == "dcoco" else {"mixture_components": 3, "mixture_rank": 4, "top_m": 8}
    )
    config = head_config(
        **shape,
        target=str(tmp_path / "target"),
        output_dir=str(tmp_path / "run"),
        data_file=str(tmp_path / "data.jsonl"),
        drafter=str(tmp_path / "pard"),
        num_steps=20,
        batch_size=2,
        learning_rate=3e-3,
        save_every=10,
        anchors_per_sequence=8,
    )
    run(config)
    log = json.loads((tmp_path / "run" / "training_log.json").read_text())
    losses = [loss for _, loss in log["losses"]]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5
    head = hf_specdec.load_drafter(tmp_path / "run" / "head")
    full = hf_specdec.load_drafter(tmp_path / "run" / "drafter")
    assert type(head) is type(full) and type(head) in (PardDCOCODrafter, PardDBLASTDrafter)
    for name, tensor in full.state_dict().items():  # the whole drafter is saved in the target's dtype
        torch.testing.assert_close(tensor.float(), head.state_dict()[name].float(), atol=1e-2, rtol=1e-2)
    saved = load_file(str(tmp_path / "run" / "checkpoint" / "model.safetensors"))  # the head's tensors only
    assert saved and all(name.split(".")[0] in head.head_modules for name in saved)


def test_the_shipped_dblast_head_sits_on_the_shipped_pard_drafter():
    """drafters/qwen2.5-coder-1.5b-pard-dblast holds the head alone: its config names the shipped PARD drafter as its
    backbone (relative to the head's folder), and its tensors have the shapes that config and the drafter's give.
    (Building it whole needs the offline 0.5B, which the benchmark's runs load.)"""
    from pathlib import Path

    from safetensors import safe_open
    from transformers import AutoConfig

    folder = Path(__file__).resolve().parents[1] / "drafters/qwen2.5-coder-1.5b-pard-dblast"
    config = AutoConfig.from_pretrained(folder)
    backbone = AutoConfig.from_pretrained(folder / config.backbone)
    assert (config.model_type, backbone.model_type) == ("hf_specdec_pard_dblast", "hf_specdec_pard")
    assert (config.base_model, config.mask_token_id) == (backbone.base_model, backbone.mask_token_id)
    with safe_open(folder / "head.safetensors", "pt") as f:
        shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
    m, r, h = config.mixture_components, config.mixture_rank, backbone.hidden_size
    assert shapes == {
        "mixture_head.codes": (m, r),
        "mixture_head.component_logits.bias": (m,),
        "mixture_head.component_logits.weight": (m, h),
        "mixture_head.down.weight": (r, h),
        "mixture_head.up.weight": (backbone.draft_vocab_size, r),
    }
