"""SpecOPD on a PARD drafter: the q it trains is the q decoding samples from, it raises the expected accepted length,
a run from a PARD adapter folder trains that adapter on and saves one that loads, a head on a PARD drafter (and
sequential OPD on any PARD drafter) is refused with what to do instead."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import saved_run_inputs, tiny_target
from test_pard import pard, tiny_lm
from test_pard_heads import with_head
from test_pard_training import _config
from test_specopd import expected_accepted, specopd_setup
from transformers import GenerationConfig, LogitsProcessorList, TemperatureLogitsWarper

import hf_specdec
from hf_specdec import DecodingSettings, PardDrafter, head_of
from hf_specdec.models.pard import PardCandidateGenerator
from hf_specdec.models.policy import BlockPolicy
from hf_specdec.training.config import DistillationConfig
from hf_specdec.training.data import TrainingSequence
from hf_specdec.training.pard_specopd import PardSpecOPDTrainer
from hf_specdec.training.run import run, trainer_class
from hf_specdec.training.specopd import SpecOPDTrainer


def test_the_q_specopd_trains_is_the_q_decoding_samples_from(tmp_path):
    """Per anchor, the trainer's q of every slot (packed pass, its head, the policy at T = 0.7) equals the softmax at
    T of the candidate generator's slot scores for the same committed tokens, and the q its sampled proposal (the
    tree decoding verifies, at the call's temperature) carries."""
    target = tiny_target("llama").float()
    drafter = pard(target, block_size=5).float()
    # SpecOPD trains the one parallel pass's q; with sampled_ar_drafts = m > 1 (the default) decoding draws drafts
    # 2..m from the LM's own conditionals instead, which no proposal tree here covers (docs/specopd.md)
    drafter.decoding = DecodingSettings(budget="fixed", sampled_ar_drafts=1)
    ids = torch.arange(10, 40)  # (T,)
    seq = TrainingSequence(ids=ids, features=torch.zeros(len(ids), 1), loss_start=1)
    config = DistillationConfig(objective="specopd", target="tiny", output_dir=str(tmp_path), temperature=0.7)
    trainer = PardSpecOPDTrainer(config, target, drafter, [seq])
    assert type(trainer.policy) is BlockPolicy and head_of(drafter) is None  # the base's policy: no head
    drafter.eval()
    anchors = torch.tensor([4, 17, 25])
    with torch.no_grad():
        states = drafter.anchor_states(seq.ids, seq.features, anchors, None)  # (n, K, H)
        scores = trainer.policy.scores(states, trainer.slot_logits(states), ids[anchors])  # (n, k, Vd) log q
        for i, a in enumerate(anchors.tolist()):
            gen = PardCandidateGenerator(drafter, target, GenerationConfig(max_length=60))
            decoded = gen.draft_logits(ids[None, : a + 1], 4).float()  # (k, Vd)
            torch.testing.assert_close(scores[i], torch.log_softmax(decoded / 0.7, -1), atol=1e-4, rtol=1e-4)
            gen = PardCandidateGenerator(drafter, target, GenerationConfig(max_length=60))
            tree = gen.sampled_tree(ids[None, : a + 1], 4, 2, LogitsProcessorList([TemperatureLogitsWarper(0.7)]))
            torch.testing.assert_close(tree.q.float(), trainer.policy.path_q(scores, tree_tokens(tree))[i, 0])


def tree_tokens(tree) -> torch.LongTensor:
    """(n, 1, k) the sampled chain of a `sampled_chain` tree (the first node of each depth), any n (q is the same)."""
    depths = tree.depths()
    return torch.tensor([tree.tokens[i] for i in tree.path_to(depths.index(max(depths)))])[None, None]


def test_specopd_raises_a_pard_drafter_s_expected_accepted_length(tmp_path):
    """Full fine-tuning (the head trains too, scored as it is at each step)."""
    config, target, _, seqs = specopd_setup(tmp_path, "block", steps=60, learning_rate=1e-2, ce_weight=1.0)
    drafter = pard(target, block_size=4).float()
    trainer = PardSpecOPDTrainer(config, target, drafter, seqs)
    before = expected_accepted(trainer, seqs)
    state = trainer.train()
    after = expected_accepted(trainer, seqs)
    assert after > before + 0.1, (before, after)
    assert state["target_passes"] == 60 * 2 + 2 * len(seqs)  # and one per sequence in each measurement
    assert state["branch_tokens"] > 0


def test_a_specopd_run_from_a_pard_adapter_folder_trains_that_adapter_on(tmp_path):
    saved_run_inputs(tmp_path, sequences=4)
    tiny_lm().save_pretrained(tmp_path / "lm")
    run(_config(tmp_path, lora_rank=4, lora_alpha=8, num_steps=6, save_every=3))
    first = tmp_path / "run" / "adapter"
    config = _config(
        tmp_path,
        objective="specopd",
        output_dir=str(tmp_path / "opd"),
        drafter=str(first),
        lora_rank=4,
        num_steps=4,
        save_every=2,
        tree_anchors=2,
        branches=3,
    )
    assert trainer_class(config) is PardSpecOPDTrainer
    run(config)
    log = json.loads((tmp_path / "opd" / "training_log.json").read_text())
    assert log["objective"] == "specopd" and log["steps"] == 4 and log["target_passes"] == 4 * 2
    assert set(log["loss_terms"]) == {"e2e_tv", "trunk_ce"} and len(log["loss_terms"]["e2e_tv"]) == 4
    continued = hf_specdec.load_drafter(tmp_path / "opd" / "adapter")
    merged = hf_specdec.load_drafter(tmp_path / "opd" / "drafter").state_dict()
    before = hf_specdec.load_drafter(first).state_dict()
    assert isinstance(continued, PardDrafter)
    for name, tensor in merged.items():
        assert torch.allclose(continued.state_dict()[name].float(), tensor.float(), atol=1e-2), name
    now = continued.state_dict()
    moved = [n for n, t in before.items() if not torch.allclose(t.float(), now[n].float(), atol=1e-4)]
    assert moved  # the four on-policy steps trained the first run's adapter on


def test_specopd_refuses_a_head_on_a_pard_drafter_and_keeps_block_drafters_its_own(tmp_path):
    """Sequential OPD (a block drafter's rollout) refuses a PARD drafter, naming the objectives that train one."""
    target = saved_run_inputs(tmp_path)  # also a block drafter in tmp_path / "drafter"
    with_head("dcoco", target, block_size=4).save_pretrained(tmp_path / "head")
    pard(target).save_pretrained(tmp_path / "pard")
    hf_specdec.save_head(with_head("dblast", target, block_size=4), tmp_path / "dblast", backbone="../pard")
    common = dict(objective="specopd", target="tiny", output_dir=str(tmp_path))
    assert trainer_class(DistillationConfig(**common, drafter=str(tmp_path / "drafter"))) is SpecOPDTrainer
    for folder, head in (("head", "dcoco"), ("dblast", "dblast")):  # full weights, and a head saved alone
        config = DistillationConfig(**common, drafter=str(tmp_path / folder))
        assert trainer_class(config) is PardSpecOPDTrainer
        refusal = f"is a PardDrafter with a {head} head, a head on a PARD drafter: SpecOPD trains the PARD drafter"
        with pytest.raises(ValueError, match=f"{refusal} itself.*train_dcoco_head"):
            PardSpecOPDTrainer.build_drafter(config, target)
    sequential = DistillationConfig(**{**common, "objective": "sequential_opd"}, drafter=str(tmp_path / "pard"))
    with pytest.raises(ValueError, match="is a PARD drafter. Train it on its own policy with --objective specopd"):
        trainer_class(sequential)
