"""DFlash training: the loss as mathematics, the packing mask by perturbation, learning, and exact resume."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import MASK_ID, make_drafter, saved_run_inputs, tiny_target
from safetensors.torch import load_file

from hf_specdec.training.config import DrafterTrainingConfig
from hf_specdec.training.data import TrainingSequence, target_features
from hf_specdec.training.losses import dflash_decayed_cross_entropy, position_weights
from hf_specdec.training.packing import block_attention_mask, pack_blocks, sample_anchors
from hf_specdec.training.trainer import DrafterTrainer

ROOT = Path(__file__).resolve().parents[1]


def test_position_weights_follow_dflash():
    w = position_weights(5, gamma=2.0)
    assert w[0] == 0 and w[1] == 1
    torch.testing.assert_close(w[2:], torch.exp(-torch.arange(1, 4, dtype=torch.float32) / 2.0))


def test_decayed_cross_entropy_equals_the_weighted_mean_by_hand():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 7, generator=g)
    labels = torch.tensor([[-100, 3, 1, -100], [-100, 0, 6, 2]])
    w = [0, 1, math.exp(-1 / 3), math.exp(-2 / 3)]
    num = den = 0.0
    for b in range(2):
        for k in range(4):
            if labels[b, k] != -100:
                num += w[k] * float(F.cross_entropy(logits[b, k][None], labels[b, k][None]))
                den += w[k]
    assert float(dflash_decayed_cross_entropy(logits, labels, gamma=3.0)) == pytest.approx(num / den, rel=1e-5)


def test_anchors_leave_context_and_labels():
    g = torch.Generator().manual_seed(0)
    a = sample_anchors(20, loss_start=8, block_size=4, num_anchors=50, rng=g)
    assert a.min() >= 7 and a.max() <= 18 and len(a) == len(set(a.tolist())) == 12
    assert len(sample_anchors(3, 3, 4, 5, g)) == 0


def test_packed_labels_and_mask_shape():
    ids = torch.arange(100, 120)
    packed = pack_blocks(ids, torch.tensor([5, 17]), 4, MASK_ID, loss_start=3, dtype=torch.float32)
    assert packed.block_ids.tolist() == [105, MASK_ID, MASK_ID, MASK_ID, 117, MASK_ID, MASK_ID, MASK_ID]
    assert packed.labels.tolist() == [[-100, 106, 107, 108], [-100, 118, 119, -100]]
    assert packed.positions[20:].tolist() == [5, 6, 7, 8, 17, 18, 19, 20]
    assert packed.attention_mask.shape == (1, 1, 8, 28)


def test_block_mask_visibility_by_perturbation():
    """Block b's output moves with context rows < a_b and its own tokens only."""
    target = tiny_target("llama")
    drafter = make_drafter(target, 4)
    T, anchors = 12, torch.tensor([3, 8])
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(1, T, 3 * 64, generator=g)
    noise = torch.randn(1, 8, 64, generator=g)
    mask = block_attention_mask(anchors, T, 4, torch.float32)
    positions = torch.cat([torch.arange(T), (anchors[:, None] + torch.arange(4)).reshape(-1)])[None]

    def run(f, n):
        with torch.no_grad():
            return drafter(n, f, positions, attention_mask=mask).last_hidden_state[0]

    base = run(feats, noise)
    changed_late = feats.clone()
    changed_late[:, 3:] += 1.0  # rows >= a_0: invisible to block 0, row 3..7 visible to block 1
    out = run(changed_late, noise)
    assert torch.allclose(out[:4], base[:4]) and not torch.allclose(out[4:], base[4:])
    changed_early = feats.clone()
    changed_early[:, 2] += 1.0
    assert not torch.allclose(run(changed_early, noise)[:4], base[:4])
    other_block = noise.clone()
    other_block[:, 5] += 1.0  # a token of block 1
    out = run(feats, other_block)
    assert torch.allclose(out[:4], base[:4]) and not torch.allclose(out[4:], base[4:])


def tiny_setup(tmp_path, steps=8, save_every=3, seed=0, device="cpu"):
    target = tiny_target("llama", device=device)  # the trainer runs on the target's device
    g = torch.Generator().manual_seed(7)
    seqs = []
    for _ in range(3):
        ids = torch.randint(3, 250, (40,), generator=g)
        seqs.append(TrainingSequence(ids, target_features(target, ids.tolist(), [0, 2, 3]), loss_start=10))
    config = DrafterTrainingConfig(
        target="tiny",
        output_dir=str(tmp_path),
        num_steps=steps,
        save_every=save_every,
        batch_size=2,
        anchors_per_sequence=6,
        block_size=4,
        learning_rate=3e-3,
        seed=seed,
        warmup_ratio=0.1,
    )
    torch.manual_seed(seed)
    drafter = make_drafter(target, 4).float()
    assert drafter.config.target_layer_ids == [0, 2, 3]
    return config, target, drafter, seqs


def test_training_lowers_the_loss(tmp_path, device):
    config, target, drafter, seqs = tiny_setup(tmp_path, steps=40, save_every=100, device=device)
    state = DrafterTrainer(config, target, drafter, seqs).train()
    losses = [loss for _, loss in state["losses"]]
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5
    assert state["supervised_tokens"] > 0


def test_resume_after_a_crash_gives_the_same_weights(tmp_path, device):
    config, target, drafter, seqs = tiny_setup(tmp_path / "a", device=device)
    DrafterTrainer(config, target, drafter, seqs).train()
    uninterrupted = {k: v.clone() for k, v in drafter.state_dict().items()}

    config, target, drafter, seqs = tiny_setup(tmp_path / "b", device=device)

    def crash(step, loss):
        if step == 5:  # after the checkpoint at step 3: steps 4-5 are lost
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        DrafterTrainer(config, target, drafter, seqs).train(on_step_end=crash)
    config, target, fresh, seqs = tiny_setup(tmp_path / "b", seed=0, device=device)
    trainer = DrafterTrainer(config, target, fresh, seqs)
    assert trainer.resume() and trainer.state["step"] == 3
    trainer.train()
    for name, tensor in uninterrupted.items():
        assert torch.equal(fresh.state_dict()[name], tensor), name
    files = {p.name for p in (tmp_path / "b" / "checkpoint").iterdir()}
    assert files == {
        "config.json",
        "model.safetensors",
        "optimizer.safetensors",
        "optimizer_groups.json",
        "trainer_state.json",
    }


def test_bad_training_config_is_refused():
    with pytest.raises(ValueError, match="num_steps"):
        DrafterTrainingConfig(target="t", output_dir="o", num_steps=0)
    with pytest.raises(ValueError, match="block_size"):
        DrafterTrainingConfig(target="t", output_dir="o", block_size=1)
    with pytest.raises(ValueError, match="learning_rate"):
        DrafterTrainingConfig(target="t", output_dir="o", learning_rate=3.0)


@pytest.mark.slow
def test_script_resumes_after_kill_9(tmp_path):
    """The CLI killed with SIGKILL mid-run, restarted, ends with the weights of a run that was never killed."""
    target = tiny_target("llama")
    target.save_pretrained(tmp_path / "target")
    g = torch.Generator().manual_seed(3)
    lines = [json.dumps({"ids": torch.randint(3, 250, (48,), generator=g).tolist(), "loss_start": 8}) for _ in range(4)]
    (tmp_path / "data.jsonl").write_text("\n".join(lines))

    def command(out):
        return [
            sys.executable,
            str(ROOT / "scripts" / "train_drafter.py"),
            "--target",
            str(tmp_path / "target"),
            "--output_dir",
            str(out),
            "--data_file",
            str(tmp_path / "data.jsonl"),
            "--block_size",
            "4",
            "--num_steps",
            "150",
            "--save_every",
            "5",
            "--batch_size",
            "2",
            "--anchors_per_sequence",
            "8",
            "--mask_token_id",
            str(MASK_ID),
            "--dtype",
            "float32",
            "--num_target_taps",
            "3",
        ]

    env = os.environ | {"HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
    subprocess.run(command(tmp_path / "whole"), check=True, env=env, capture_output=True)
    proc = subprocess.Popen(command(tmp_path / "killed"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = tmp_path / "killed" / "checkpoint" / "trainer_state.json"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if state.exists() and json.loads(state.read_text())["step"] >= 10:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "training finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    subprocess.run(command(tmp_path / "killed"), check=True, env=env, capture_output=True)
    log = json.loads((tmp_path / "killed" / "training_log.json").read_text())
    assert log["resumed"] and log["steps"] == 150
    a = load_file(str(tmp_path / "whole" / "drafter" / "model.safetensors"))
    b = load_file(str(tmp_path / "killed" / "drafter" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_feature_extraction_resumes_after_a_crash(tmp_path, monkeypatch):
    from hf_specdec.training import data

    target = tiny_target("llama")
    g = torch.Generator().manual_seed(5)
    items = [(torch.randint(3, 250, (20,), generator=g).tolist(), 4) for _ in range(7)]
    whole = data.build_sequences(target, items, [0, 2], 64, tmp_path / "whole", target_labels=True, shard_size=2)
    calls, armed = [], [True]
    real = data.target_features_and_argmax

    def flaky(*args, **kwargs):
        calls.append(1)
        if armed[0] and len(calls) == 4:
            raise RuntimeError("killed")  # dies inside the second shard
        return real(*args, **kwargs)

    monkeypatch.setattr(data, "target_features_and_argmax", flaky)
    with pytest.raises(RuntimeError, match="killed"):
        data.build_sequences(target, items, [0, 2], 64, tmp_path / "cut", target_labels=True, shard_size=2)
    calls.clear()
    armed[0] = False
    again = data.build_sequences(target, items, [0, 2], 64, tmp_path / "cut", target_labels=True, shard_size=2)
    assert len(calls) == 5  # the first shard (2 items) was kept
    assert len(again) == len(whole) == 7
    for a, b in zip(again, whole, strict=True):
        assert torch.equal(a.ids, b.ids) and torch.equal(a.next_tokens, b.next_tokens)
        torch.testing.assert_close(a.features, b.features)


def test_corrector_training_learns_transitions_with_a_frozen_backbone(tmp_path):
    from hf_specdec import DCOCODrafter
    from hf_specdec.training.config import DCOCOHeadTrainingConfig
    from hf_specdec.training.dcoco import DCOCOHeadTrainer

    _, target, base, seqs = tiny_setup(tmp_path)
    pattern = torch.tensor([5, 9, 17, 33, 65, 129, 200, 11])  # a fixed cycle: each token determines the next
    for seq in seqs:
        seq.ids = pattern.repeat(5)
        seq.features = target_features(target, seq.ids.tolist(), [0, 2, 3])
    config = DCOCOHeadTrainingConfig(
        target="tiny",
        output_dir=str(tmp_path),
        drafter="unused",
        corrector_candidates=128,
        num_steps=40,
        save_every=100,
        batch_size=2,
        anchors_per_sequence=6,
        block_size=4,
        learning_rate=3e-3,
        warmup_ratio=0.1,
    )
    drafter = DCOCODrafter.from_block_drafter(base, corrector_candidates=128)
    backbone = {k: v.clone() for k, v in drafter.state_dict().items() if not k.startswith("corrector.")}
    trainer = DCOCOHeadTrainer(config, target, drafter, seqs)
    state = trainer.train()
    losses = [loss for _, loss in state["losses"]]
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5
    assert 0.2 < trainer.candidate_recall < 1.0
    assert all(torch.equal(v, drafter.state_dict()[k]) for k, v in backbone.items())
    with pytest.raises(ValueError, match="--drafter is required"):
        DCOCOHeadTrainingConfig(target="tiny", output_dir=str(tmp_path))


def test_joint_corrector_training_also_moves_the_backbone(tmp_path):
    from hf_specdec import DCOCODrafter
    from hf_specdec.training.config import DCOCOHeadTrainingConfig
    from hf_specdec.training.dcoco import DCOCOHeadTrainer

    _, target, base, seqs = tiny_setup(tmp_path)
    config = DCOCOHeadTrainingConfig(
        target="tiny",
        output_dir=str(tmp_path),
        drafter="unused",
        corrector_candidates=32,
        num_steps=3,
        save_every=100,
        batch_size=2,
        anchors_per_sequence=6,
        block_size=4,
        learning_rate=3e-3,
        joint=True,
    )
    drafter = DCOCODrafter.from_block_drafter(base, corrector_candidates=32)
    fc = drafter.fc.weight.detach().clone()
    DCOCOHeadTrainer(config, target, drafter, seqs).train()
    assert not torch.equal(fc, drafter.fc.weight)


def test_mixture_head_training_raises_expected_acceptance(tmp_path):
    from hf_specdec import DBLASTDrafter
    from hf_specdec.training.config import DBLASTHeadTrainingConfig
    from hf_specdec.training.dblast import DBLASTHeadTrainer, cache_target_probs

    _, target, base, seqs = tiny_setup(tmp_path)
    config = DBLASTHeadTrainingConfig(
        target="tiny",
        output_dir=str(tmp_path),
        drafter="unused",
        mixture_components=4,
        mixture_rank=8,
        top_m=16,
        num_steps=30,
        save_every=100,
        batch_size=2,
        anchors_per_sequence=6,
        block_size=4,
        learning_rate=1e-2,
        warmup_ratio=0.1,
    )
    probs = cache_target_probs(target, seqs, tmp_path / "p", config.temperature, config.top_m)
    assert probs[0][0].shape == (40, 16) and torch.allclose(probs[0][0].sum(-1), torch.ones(40))
    assert cache_target_probs(target, seqs, tmp_path / "p", 1.0, 16)[1][1].equal(probs[1][1])  # cached
    drafter = DBLASTDrafter.from_block_drafter(base, mixture_components=4, mixture_rank=8)
    backbone = {k: v.clone() for k, v in drafter.state_dict().items() if not k.startswith("mixture_head.")}
    state = DBLASTHeadTrainer(config, target, drafter, seqs, probs).train()
    losses = [loss for _, loss in state["losses"]]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5
    assert all(torch.equal(v, drafter.state_dict()[k]) for k, v in backbone.items())
    with pytest.raises(ValueError, match="temperature"):
        DBLASTHeadTrainingConfig(target="tiny", output_dir=str(tmp_path), drafter="x", temperature=0)
    with pytest.raises(ValueError, match="draft_vocab_size"):
        DBLASTHeadTrainingConfig(target="tiny", output_dir=str(tmp_path), drafter="x", draft_vocab_size=64)


def test_head_training_pipelines_save_loadable_drafters_and_logs(tmp_path):
    """run() of DCOCO and DBLAST head configs end to end on a saved tiny target and drafter."""
    from hf_specdec import DBLASTDrafter, DCOCODrafter, load_drafter
    from hf_specdec.training.config import DBLASTHeadTrainingConfig, DCOCOHeadTrainingConfig
    from hf_specdec.training.counters import COUNTERS
    from hf_specdec.training.run import run

    saved_run_inputs(tmp_path)
    common = dict(
        target=str(tmp_path / "target"),
        drafter=str(tmp_path / "drafter"),
        data_file=str(tmp_path / "data.jsonl"),
        data_dir=str(tmp_path / "data"),
        block_size=4,
        num_steps=3,
        save_every=2,
        batch_size=2,
        anchors_per_sequence=4,
        dtype="float32",
    )
    for config, cls, key in [
        (
            DCOCOHeadTrainingConfig(output_dir=str(tmp_path / "c"), corrector_candidates=32, **common),
            DCOCODrafter,
            "candidate_recall",
        ),
        (
            DBLASTHeadTrainingConfig(
                output_dir=str(tmp_path / "m"), mixture_components=2, mixture_rank=4, top_m=8, **common
            ),
            DBLASTDrafter,
            "head_parameters",
        ),
    ]:
        out = run(config)
        assert isinstance(load_drafter(out), cls)  # the block drafter carrying the trained head
        log = json.loads((Path(config.output_dir) / "training_log.json").read_text())
        assert log["steps"] == 3 and len(log["losses"]) == 3 and key in log and log["supervised_slots"] > 0
        assert set(COUNTERS) - {"supervised_tokens"} <= log.keys()  # every counter, the one list


def test_the_config_class_picks_the_trainer():
    """--objective names a config class; the class, not the name, picks the trainer; recipes keep the flag."""
    from hf_specdec.training.config import (
        DBLASTHeadTrainingConfig,
        DCOCOHeadTrainingConfig,
        DistillationConfig,
        SequentialOPDConfig,
        SpecOPDConfig,
    )
    from hf_specdec.training.dblast import DBLASTHeadTrainer
    from hf_specdec.training.dcoco import DCOCOHeadTrainer
    from hf_specdec.training.publishing import recipe_command
    from hf_specdec.training.run import trainer_class
    from hf_specdec.training.sequential_opd import SequentialOPDTrainer
    from hf_specdec.training.specopd import SpecOPDTrainer

    settings = dict(target="t", output_dir="o")
    spec = DistillationConfig(**settings, objective="specopd", branches=2).for_objective()
    assert type(spec) is SpecOPDConfig and spec.branches == 2 and spec.for_objective() is spec
    assert type(spec.for_objective("sequential_opd")) is SequentialOPDConfig
    expected = [
        (DrafterTrainingConfig(**settings), DrafterTrainer),
        (DistillationConfig(**settings), DrafterTrainer),
        (DistillationConfig(**settings, objective="specopd"), SpecOPDTrainer),
        (SpecOPDConfig(**settings), SpecOPDTrainer),
        (DistillationConfig(**settings, objective="sequential_opd"), SequentialOPDTrainer),
        (DCOCOHeadTrainingConfig(**settings, drafter="d"), DCOCOHeadTrainer),
        (DBLASTHeadTrainingConfig(**settings, drafter="d"), DBLASTHeadTrainer),
    ]
    assert [trainer_class(config) for config, _ in expected] == [cls for _, cls in expected]
    with pytest.raises(ValueError, match="specopd objective"):
        SpecOPDConfig(**settings, objective="dflash")
    with pytest.raises(ValueError, match="objective must be"):
        spec.for_objective("ppo")
    assert "--objective specopd" in recipe_command(spec) and "--objective" not in recipe_command(
        DistillationConfig(**settings).for_objective()
    )
    assert recipe_command(DCOCOHeadTrainingConfig(**settings, drafter="d")).startswith(
        "python scripts/train_dcoco_head"
    )


def test_a_checkpoint_recorded_under_a_config_class_s_earlier_name_resumes():
    """Head trainings' config classes were renamed (CorrectorTrainingConfig -> DCOCOHeadTrainingConfig, ...): a
    checkpoint that recorded the earlier name is the same run; another class is still refused."""
    from hf_specdec.training.checkpoint import argument_changes, run_arguments
    from hf_specdec.training.config import DBLASTHeadTrainingConfig, DCOCOHeadTrainingConfig

    for config, earlier in [
        (DCOCOHeadTrainingConfig(target="t", drafter="d", output_dir="o"), "CorrectorTrainingConfig"),
        (DBLASTHeadTrainingConfig(target="t", drafter="d", output_dir="o"), "MixtureTrainingConfig"),
    ]:
        recorded = {**run_arguments(config), "config_class": earlier}
        assert argument_changes(recorded, config) == []
        assert argument_changes({**recorded, "config_class": "DFlashConfig"}, config)
