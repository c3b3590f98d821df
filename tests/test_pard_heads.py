"""Heads on a PARD drafter: DCOCO's corrector and DBLAST's mixture, attached with `attach_head` (the drafter stays a
`PardDrafter`; `head_of(drafter)` names the head; the aliases `PardDCOCODrafter` / `PardDBLASTDrafter` build the same).

Contracts: greedy output equals plain greedy with drafts that are all, none or exactly j accepted (chain, tree,
lookup branch), also with a trained-looking (random) head, in batches and the server; a fresh mixture head drafts
exactly as the PARD drafter under it; the states a head reads are the same in decoding and in training's packed
pass, and the head's policy (training) reads from them the q its proposals (decoding) draft with; full weights and a
head saved alone (over a PARD drafter named as its backbone), also in the format saved when each pair was a class of
its own, load back through `load_drafter` / `AutoModel`; a corrector and a mixture head train on a PARD drafter and
save a loadable head.
(Sampling with either head: tests/test_sampling_distribution.py.)
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import MASK_ID, VOCAB, assert_batch_and_server_equal_plain, saved_run_inputs
from safetensors.torch import load_file
from test_pard import OraclePardDrafter, tiny_lm
from transformers import AutoModel, GenerationConfig

import hf_specdec
from hf_specdec import (
    DecodingSettings,
    PardCandidateGenerator,
    PardConfig,
    PardDBLASTConfig,
    PardDBLASTDrafter,
    PardDCOCOConfig,
    PardDCOCODrafter,
    PardDrafter,
    head_of,
)
from hf_specdec.models.attach import head_state_dict
from hf_specdec.models.heads.dblast.mixture import mixture_conditionals
from hf_specdec.models.heads.dcoco.walk import walk_q
from hf_specdec.training.config import DBLASTHeadTrainingConfig, DCOCOHeadTrainingConfig
from hf_specdec.training.data import TrainingSequence
from hf_specdec.training.run import run
from hf_specdec.training.specopd import policy_for

NEW_TOKENS = 21
SHAPES = {"dcoco": {"corrector_candidates": 8}, "dblast": {"mixture_components": 3, "mixture_rank": 4}}
ALIASES = {"dcoco": PardDCOCODrafter, "dblast": PardDBLASTDrafter}  # the names each pair had as a class


def pard(target, block_size=5, cls=PardDrafter) -> PardDrafter:
    return cls.from_causal_lm(tiny_lm().to(target.device), target, mask_token_id=MASK_ID, block_size=block_size)


def with_head(kind, target, block_size=5, random_head=False, base_cls=PardDrafter):
    """A PARD drafter (of `base_cls`: an oracle's too) with a DCOCO corrector or a DBLAST mixture head attached
    (random: transitions / offsets that matter)."""
    drafter = hf_specdec.attach_head(pard(target, block_size, base_cls), kind, **SHAPES[kind])
    assert type(drafter) is base_cls and head_of(drafter).name == kind and isinstance(drafter, ALIASES[kind])
    if random_head:
        torch.manual_seed(3)
        if kind == "dcoco":
            torch.nn.init.normal_(drafter.corrector.scorer_out.weight, std=2.0)
        else:
            torch.nn.init.normal_(drafter.mixture_head.up.weight, std=2.0)
    drafter.decoding = DecodingSettings(budget="fixed")
    return drafter.eval()


SETTINGS = {
    "chain": DecodingSettings(budget="fixed"),
    "tree": DecodingSettings(budget="fixed", tree_budget=8, tree_topk=2),
    "chain + lookup": DecodingSettings(budget="fixed", prompt_lookup_tokens=3),
}


@pytest.mark.parametrize("kind", ["dcoco", "dblast"])
@pytest.mark.parametrize("name", list(SETTINGS))
@pytest.mark.parametrize("accept", ["none", "all", "j"])
def test_oracle_heads_give_plain_greedy_output_accepting_none_all_or_j(target, prompt, kind, name, accept):
    block_size = 5
    j = {"none": 0, "all": None, "j": 2}[accept]
    drafter = with_head(kind, target, block_size, base_cls=OraclePardDrafter)  # the head reads the oracle's scores
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
    drafter = PardDBLASTDrafter.from_pard(base, mixture_components=3, mixture_rank=4).eval()  # = attach_head
    assert type(drafter) is PardDrafter and head_of(drafter).name == "dblast" and head_of(base) is None
    assert drafter.decoding == base.decoding and drafter.lm is base.lm  # the base's weights, shared
    ref = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=base)
    out = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=drafter)
    assert torch.equal(out, ref)
    assert drafter.last_acceptance_stats.accepted == base.last_acceptance_stats.accepted


@pytest.mark.parametrize("kind", ["dcoco", "dblast"])
def test_training_reads_the_states_decoding_gives_the_head(target, prompt, kind):
    """`PardDrafter.anchor_states` (one packed pass over many anchors) equals, anchor by anchor, what the candidate
    generator hands a head in decoding (`block_states`), so a head is trained on what it will see; and the head's
    policy (training, batched over the anchors) reads from them the scores, greedy block and q along a block that
    its proposals (decoding, one anchor) read: trained q = decoding q."""
    drafter = with_head(kind, target, block_size=5, random_head=True)
    ids = torch.cat([prompt[0], torch.arange(20, 40)]).to(target.device)  # (T,)
    T, k, temperature = ids.shape[0], drafter.config.block_size - 1, 0.7
    seq = TrainingSequence(ids=ids, features=torch.zeros(T, 1), loss_start=1)
    anchors = torch.tensor([3, 10, T - 3])
    policy = policy_for(drafter, drafter.get_input_embeddings(), temperature, torch.arange(VOCAB))
    assert type(policy) is head_of(drafter).policy_class
    with torch.no_grad():
        packed = drafter.anchor_states(seq.ids, seq.features, anchors, None)  # (n, K, H)
        logits = F.linear(packed, drafter.head_weight(), drafter.get_output_embeddings().bias)  # (n, K, Vd)
        trained = policy.scores(packed, logits, ids[anchors])
        greedy = policy.draw(trained, 1, None)  # (n, 1, k) draft-vocabulary indices (= ids: no reduced vocabulary)
        trained_q = policy.path_q(trained, greedy)  # (n, 1, k, Vd)
        # greedy decoding reads the head at T = 1 (a mixture's greedy component depends on the temperature)
        at_one = policy_for(drafter, drafter.get_input_embeddings(), 1.0, torch.arange(VOCAB))
        greedy_at_one = at_one.draw(at_one.scores(packed, logits, ids[anchors]), 1, None)  # (n, 1, k)
        for i, a in enumerate(anchors.tolist()):
            gen = PardCandidateGenerator(drafter, target, GenerationConfig(max_length=T + 10))
            assert gen.head is not None
            hidden, _ = gen.block_states(ids[None, : a + 1], k)  # (k + 1, H)
            torch.testing.assert_close(packed[i], hidden, atol=1e-4, rtol=1e-4)
            gen = PardCandidateGenerator(drafter, target, GenerationConfig(max_length=T + 10))
            chain, _ = gen.chain(ids[None, : a + 1], k)  # (k,) decoding's greedy block, through the head
            assert chain.tolist() == greedy_at_one[i, 0].tolist()
            gen = PardCandidateGenerator(drafter, target, GenerationConfig(max_length=T + 10))
            if kind == "dcoco":
                decoded = gen.head.scores(ids[None, : a + 1], k)  # CorrectorScores of one block
                assert torch.equal(decoded.ids[0], trained.ids[i])
                torch.testing.assert_close(decoded.first[0], trained.first[i], atol=1e-4, rtol=1e-4)
                torch.testing.assert_close(decoded.nxt[0], trained.nxt[i], atol=1e-4, rtol=1e-4)
                picks = (decoded.index[0] == greedy[i, 0, :, None]).float().argmax(-1)  # (k,) candidate indices
                q_cand = walk_q(decoded.first, decoded.nxt, picks[None, None], temperature)[0, 0]  # (k, Kc)
                decoded_q = q_cand.new_zeros(k, VOCAB).scatter(1, decoded.index[0], q_cand)
            else:
                log_pi, logq = gen.head.mixture(ids[None, : a + 1], k, temperature)  # (1, R), (1, k, R, Vd)
                torch.testing.assert_close(log_pi[0], trained[0][i], atol=1e-4, rtol=1e-4)
                torch.testing.assert_close(logq[0], trained[1][i], atol=1e-4, rtol=1e-4)
                decoded_q = mixture_conditionals(log_pi, logq, greedy[i : i + 1])[0, 0]  # (k, Vd)
            torch.testing.assert_close(trained_q[i, 0], decoded_q, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", ["dcoco", "dblast"])
def test_full_weights_and_a_head_saved_alone_load_back(target, prompt, tmp_path, kind):
    drafter = with_head(kind, target, random_head=True)
    drafter.decoding = DecodingSettings(budget="fixed", tree_budget=5, tree_topk=2)
    drafter.save_pretrained(tmp_path / "full")
    base = PardDrafter.from_causal_lm(drafter.lm, target, mask_token_id=MASK_ID, block_size=5)
    base.save_pretrained(tmp_path / "pard")
    hf_specdec.save_head(drafter, tmp_path / "head", backbone="../pard")
    files = sorted(p.name for p in (tmp_path / "head").iterdir())
    assert files == ["config.json", "head.safetensors"]  # the head alone: no copy of the LM
    assert set(load_file(str(tmp_path / "head" / "head.safetensors"))) == set(head_state_dict(drafter))
    assert all(name.split(".")[0] == head_of(drafter).attr for name in head_state_dict(drafter))
    expected = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=drafter)
    loaders = (
        lambda: AutoModel.from_pretrained(tmp_path / "full"),
        lambda: hf_specdec.load_drafter(tmp_path / "head"),
        lambda: hf_specdec.load_head_folder(tmp_path / "head"),
    )
    for load in loaders:
        loaded = load()
        assert type(loaded) is PardDrafter and loaded.decoding == drafter.decoding
        assert head_of(loaded).name == kind and loaded.config.head == drafter.config.head
        assert loaded.config.model_type == PardConfig.model_type and not loaded.config.backbone
        for name, tensor in drafter.state_dict().items():
            assert torch.equal(tensor, loaded.state_dict()[name]), name
        out = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=loaded.eval())
        assert torch.equal(out, expected)


def test_a_head_folder_whose_backbone_is_missing_says_so(target, tmp_path):
    drafter = with_head("dcoco", target)
    hf_specdec.save_head(drafter, tmp_path / "head", backbone="../nowhere")
    with pytest.raises(OSError, match="nowhere"):
        hf_specdec.load_drafter(tmp_path / "head")


def test_bad_head_shapes_are_refused(target):
    with pytest.raises(ValueError, match="corrector_candidates"):
        PardDCOCODrafter.from_pard(pard(target), corrector_candidates=0)
    with pytest.raises(ValueError, match="mixture_components"):
        PardDBLASTDrafter.from_pard(pard(target), mixture_components=0)
    with pytest.raises(ValueError, match="corrector_candidates"):
        hf_specdec.attach_head(pard(target), "dcoco", corrector_candidates=0)
    with pytest.raises(ValueError, match="mixture_components"):
        hf_specdec.attach_head(pard(target), "dblast", mixture_components=0)
    with pytest.raises(ValueError, match="already carries a dcoco head"):  # one head per drafter
        hf_specdec.attach_head(with_head("dcoco", target), "dblast")


@pytest.mark.parametrize("kind", ["dcoco", "dblast"])
def test_a_head_trains_on_a_pard_drafter_and_saves_a_loadable_head(tmp_path, kind):
    target = saved_run_inputs(tmp_path, sequences=4)
    pard(target).save_pretrained(tmp_path / "pard")
    head_config = DCOCOHeadTrainingConfig if kind == "dcoco" else DBLASTHeadTrainingConfig
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
    assert type(head) is type(full) is PardDrafter
    assert head_of(head).name == head_of(full).name == kind and head.config.head == full.config.head
    for name, tensor in full.state_dict().items():  # the whole drafter is saved in the target's dtype
        torch.testing.assert_close(tensor.float(), head.state_dict()[name].float(), atol=1e-2, rtol=1e-2)
    saved = load_file(str(tmp_path / "run" / "checkpoint" / "model.safetensors"))  # the head's tensors only
    assert saved and all(name.split(".")[0] == head_of(head).attr for name in saved)


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
    assert (config.model_type, backbone.model_type) == ("hf_specdec_pard_dblast", "hf_specdec_pard")  # the old format
    assert isinstance(config, PardDBLASTConfig) and isinstance(config, PardConfig) and head_of(config).name == "dblast"
    assert (config.base_model, config.mask_token_id) == (backbone.base_model, backbone.mask_token_id)
    with safe_open(folder / "head.safetensors", "pt") as f:
        shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
    m, r, h = config.head["mixture_components"], config.head["mixture_rank"], backbone.hidden_size
    assert shapes == {
        "mixture_head.codes": (m, r),
        "mixture_head.component_logits.bias": (m,),
        "mixture_head.component_logits.weight": (m, h),
        "mixture_head.down.weight": (r, h),
        "mixture_head.up.weight": (backbone.draft_vocab_size, r),
    }


@pytest.mark.parametrize("layout", ["head alone", "full weights"])
@pytest.mark.parametrize("kind", ["dcoco", "dblast"])
def test_a_folder_saved_in_the_old_pair_format_loads_with_its_head(target, prompt, tmp_path, kind, layout):
    """A folder saved when each pair was a class of its own (model_type hf_specdec_pard_dcoco / _pard_dblast, the
    head's shape at the top level of its config, no `head`), the head alone over a PARD folder (as the shipped one)
    or the full weights, loads as a PardDrafter carrying the head, drafting as before."""
    drafter = with_head(kind, target, random_head=True)
    pard(target).save_pretrained(tmp_path / "pard")  # the same LM weights (tiny_lm's seed)
    folder = tmp_path / "old"
    if layout == "head alone":
        hf_specdec.save_head(drafter, folder, backbone="../pard")
    else:
        drafter.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    shape = {k: v for k, v in config.pop("head").items() if k != "type"}
    if layout == "full weights":
        config.pop("backbone", None)
    old_type = {"dcoco": "hf_specdec_pard_dcoco", "dblast": "hf_specdec_pard_dblast"}[kind]
    (folder / "config.json").write_text(json.dumps({**config, **shape, "model_type": old_type}))
    expected = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=drafter)
    config_class = {"dcoco": PardDCOCOConfig, "dblast": PardDBLASTConfig}[kind]
    for load in (hf_specdec.load_drafter, AutoModel.from_pretrained, ALIASES[kind].from_pretrained):
        loaded = load(folder)
        assert type(loaded) is PardDrafter and head_of(loaded).name == kind, load
        assert {k: v for k, v in loaded.config.head.items() if k in shape} == shape
        if layout == "full weights":
            assert isinstance(loaded.config, config_class)
        for name, tensor in drafter.state_dict().items():
            assert torch.equal(tensor, loaded.state_dict()[name]), name
        out = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=loaded.eval())
        assert torch.equal(out, expected)
