"""Training never saves a broken state: non-finite steps stop (or are skipped) and leave the last finite checkpoint,
a resume with arguments that change the result is refused with the list of what differs, and checkpoint files reach
the disk before they replace the old checkpoint."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import MASK_ID, saved_run_inputs
from safetensors.torch import load_file
from test_training import tiny_setup

from hf_specdec.training.checkpoint import NonFiniteError
from hf_specdec.training.config import DistillationConfig, DrafterTrainingConfig
from hf_specdec.training.trainer import DrafterTrainer


def poisoned_run(tmp_path, steps=12, **overrides):
    """A tiny run whose sequence `bad` has one nan in its target features, first picked at 0-based step `first` >= 1
    (so a checkpoint written before it exists)."""
    config, target, drafter, seqs = tiny_setup(tmp_path, steps=steps, save_every=1)
    config = replace(config, **overrides)
    trainer = DrafterTrainer(config, target, drafter, seqs)
    firsts = {i: next(s for s in range(steps) if i in trainer.step_picks(s)) for i in range(len(seqs))}
    bad = max(firsts, key=firsts.get)
    assert firsts[bad] >= 1
    seqs[bad].features[3, 0] = float("nan")  # a context row every training block of the sequence sees
    return trainer, bad, firsts[bad]


def checkpoint_weights(run: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    folder = run / "checkpoint"
    return json.loads((folder / "trainer_state.json").read_text()), load_file(str(folder / "model.safetensors"))


def all_finite(tensors) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point())


def test_nan_in_the_data_stops_the_run_naming_step_and_sequence_and_keeps_the_last_checkpoint(tmp_path):
    trainer, bad, first = poisoned_run(tmp_path)
    with pytest.raises(NonFiniteError) as stopped:
        trainer.train()
    message = str(stopped.value)
    assert f"step {first + 1} of 12: non-finite loss nan on training sequences" in message
    assert f"sequences [{bad}] have non-finite target features" in message
    assert "last checkpoint" in message and "nonfinite='skip'" in message

    state, saved = checkpoint_weights(tmp_path)
    assert state["step"] == first and all_finite(saved.values())  # the step before the bad one, intact
    assert all_finite(trainer.drafter.parameters())  # nothing of the bad step was applied in memory either
    for name, tensor in saved.items():
        assert torch.equal(trainer.drafter.state_dict()[name], tensor), name

    # the fix the message names: resume with nonfinite="skip" (a change allowed on resume) and finish
    config, target, fresh, seqs = tiny_setup(tmp_path, steps=12, save_every=1)
    seqs[bad].features[3, 0] = float("nan")
    again = DrafterTrainer(replace(config, nonfinite="skip"), target, fresh, seqs)
    assert again.resume() and again.state["step"] == first
    assert again.train()["step"] == 12 and all_finite(fresh.parameters())


def test_skip_mode_skips_exactly_the_steps_with_the_bad_sequence(tmp_path, caplog):
    trainer, bad, first = poisoned_run(tmp_path, nonfinite="skip")
    caplog.set_level(logging.WARNING)
    state = trainer.train()
    skipped = [s + 1 for s in range(12) if bad in trainer.step_picks(s)]
    assert 0 < len(skipped) < 12 and skipped[0] == first + 1
    assert [step for step, _ in state["skipped_steps"]] == skipped
    assert [step for step, _ in state["losses"]] == [s for s in range(1, 13) if s not in skipped]
    assert all(torch.isfinite(torch.tensor(loss)) for _, loss in state["losses"])
    assert f"step {first + 1} of 12" in caplog.text and "skipped" in caplog.text
    saved_state, saved = checkpoint_weights(tmp_path)
    assert saved_state["step"] == 12 and saved_state["skipped_steps"] == state["skipped_steps"]
    assert all_finite(saved.values()) and all_finite(trainer.drafter.parameters())


def test_a_non_finite_gradient_with_a_finite_loss_stops_the_run(tmp_path):
    config, target, drafter, seqs = tiny_setup(tmp_path, steps=6, save_every=2)
    trainer = DrafterTrainer(config, target, drafter, seqs)

    def poison_gradients(step, loss):
        if step == 2:  # from step 3 on, fc's gradient overflows
            drafter.fc.weight.register_hook(lambda grad: torch.full_like(grad, float("inf")))

    with pytest.raises(NonFiniteError, match=r"step 3 of 6: non-finite gradient norm inf \(loss \d"):
        trainer.train(on_step_end=poison_gradients)
    state, saved = checkpoint_weights(tmp_path)
    assert state["step"] == 2 and all_finite(saved.values()) and all_finite(drafter.parameters())


def test_a_checkpoint_is_never_written_from_non_finite_weights(tmp_path):
    config, target, drafter, seqs = tiny_setup(tmp_path, steps=2, save_every=1)
    trainer = DrafterTrainer(config, target, drafter, seqs)
    trainer.train()
    before = {p.name: p.read_bytes() for p in (tmp_path / "checkpoint").iterdir()}
    with torch.no_grad():
        drafter.fc.weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteError, match=r"non-finite values in \['fc.weight'\].*is kept"):
        trainer.save()
    assert {p.name: p.read_bytes() for p in (tmp_path / "checkpoint").iterdir()} == before


def test_resuming_with_arguments_that_change_the_result_is_refused_with_the_list(tmp_path):
    config, target, drafter, seqs = tiny_setup(tmp_path, steps=4, save_every=2)
    DrafterTrainer(config, target, drafter, seqs).train()

    _, target, fresh, seqs = tiny_setup(tmp_path, steps=4, save_every=2)
    untouched = {k: v.clone() for k, v in fresh.state_dict().items()}
    changed = replace(config, block_size=8, learning_rate=1e-3, seed=1, num_steps=3)
    trainer = DrafterTrainer(changed, target, fresh, seqs)
    with pytest.raises(ValueError, match="cannot resume") as refused:
        trainer.resume()
    message = str(refused.value)
    for line in (
        "block_size: 4 in the checkpoint, 8 now",
        "learning_rate: 0.003 in the checkpoint, 0.001 now",
        "seed: 0 in the checkpoint, 1 now",
        "num_steps: 4 in the checkpoint, 3 now",  # a shorter run is a different run
    ):
        assert line in message
    assert "anchors_per_sequence:" not in message and "may only grow" in message
    assert trainer.state["step"] == 0  # refused before anything was loaded
    assert all(torch.equal(v, fresh.state_dict()[k]) for k, v in untouched.items())

    allowed = replace(config, num_steps=6, save_every=3, nonfinite="skip", push_to_hub="org/x", hub_target_id="org/t")
    trainer = DrafterTrainer(allowed, target, fresh, seqs)
    assert trainer.resume() and trainer.state["step"] == 4
    assert trainer.train()["step"] == 6
    recorded = json.loads((tmp_path / "checkpoint" / "trainer_state.json").read_text())["arguments"]
    assert recorded["num_steps"] == 6 and recorded["config_class"] == "DrafterTrainingConfig"


def test_a_trainer_that_loads_its_own_checkpoints_is_checked_too(tmp_path):
    """PARD's trainer checkpoints its trainable tensors only (`checkpointed`); its run still refuses changes."""
    from test_pard import tiny_lm

    from hf_specdec.training.run import run

    saved_run_inputs(tmp_path, sequences=2)
    tiny_lm().save_pretrained(tmp_path / "lm")
    settings = dict(
        objective="pard",
        target=str(tmp_path / "target"),
        output_dir=str(tmp_path / "run"),
        dtype="float32",
        data_file=str(tmp_path / "data.jsonl"),
        base_lm=str(tmp_path / "lm"),
        block_size=4,
        mask_token_id=MASK_ID,
        num_steps=2,
        batch_size=1,
        save_every=2,
        num_target_taps=1,
        lora_rank=2,
    )
    run(DistillationConfig(**settings))
    with pytest.raises(ValueError, match=r"cannot resume[\s\S]*cod_ratio: 0.7 in the checkpoint, 0.5 now"):
        run(DistillationConfig(**settings, cod_ratio=0.5))


def test_checkpoint_files_reach_the_disk_before_the_swap(tmp_path, monkeypatch):
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc/self/fd to name the flushed files")
    config, target, drafter, seqs = tiny_setup(tmp_path, steps=1, save_every=1)
    trainer = DrafterTrainer(config, target, drafter, seqs)
    trainer.save()  # an older checkpoint for the next save to replace
    events: list[tuple[str, str]] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def rename(src, dst, *args, **kwargs):
        events.append(("rename", f"{src} -> {dst}"))
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    trainer.save()
    ckpt = (tmp_path / "checkpoint").resolve()
    swap = events.index(("rename", f"{tmp_path / 'checkpoint.tmp'} -> {tmp_path / 'checkpoint'}"))
    flushed_before = {path for kind, path in events[:swap] if kind == "fsync"}
    written = {str(ckpt.with_name("checkpoint.tmp") / p.name) for p in ckpt.iterdir()}
    assert written <= flushed_before and str(ckpt.with_name("checkpoint.tmp")) in flushed_before
    assert ("fsync", str(ckpt.parent)) in events[swap:]  # the renames themselves


def test_nonfinite_setting_is_checked():
    assert DrafterTrainingConfig(target="t", output_dir="o").nonfinite == "stop"
    with pytest.raises(ValueError, match="nonfinite must be stop or skip"):
        DrafterTrainingConfig(target="t", output_dir="o", nonfinite="ignore")
