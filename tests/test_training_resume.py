"""Resume knows its data and its files: a checkpoint records a fingerprint of its training sequences and a resume on
other data is refused with what differs; a damaged checkpoint is refused naming the file and the command that starts
afresh; an old checkpoint without a fingerprint still resumes, saying so; a skip-mode run that skipped every step
ends with an error."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import saved_run_inputs
from test_training import tiny_setup
from test_training_ux import tiny_run_settings

from hf_specdec.training.checkpoint import DamagedCheckpoint, NonFiniteError
from hf_specdec.training.commands import afresh_command
from hf_specdec.training.config import DistillationConfig
from hf_specdec.training.run import run
from hf_specdec.training.trainer import DrafterTrainer


def trained(tmp_path: Path, steps: int = 2):
    """A tiny run trained to its end (a checkpoint in tmp_path/checkpoint), and a fresh setup to resume with."""
    config, target, drafter, seqs = tiny_setup(tmp_path, steps=steps, save_every=steps)
    DrafterTrainer(config, target, drafter, seqs).train()
    return tiny_setup(tmp_path, steps=steps, save_every=steps)


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def unchanged(model, before: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_a_checkpoint_resumes_on_the_same_data(tmp_path):
    config, target, drafter, seqs = trained(tmp_path)
    state = json.loads((tmp_path / "checkpoint" / "trainer_state.json").read_text())
    assert state["data"]["sequences"] == 3 and len(state["data"]["sha256"]) == 64
    trainer = DrafterTrainer(replace(config, num_steps=3), target, drafter, seqs)
    assert trainer.resume() and trainer.train()["step"] == 3


@pytest.mark.parametrize("change", ["a token", "a loss start", "a sequence fewer", "with other settings"])
def test_a_resume_on_other_data_is_refused_with_what_differs(tmp_path, change):
    config, target, drafter, seqs = trained(tmp_path)
    if change == "a token":
        seqs[1].ids[20] = (int(seqs[1].ids[20]) + 1) % 250
    elif change == "a loss start":
        seqs[2].loss_start += 1
    else:
        seqs = seqs[:2]
    if change == "with other settings":
        config = replace(config, seed=1)
    before = weights(drafter)
    trainer = DrafterTrainer(config, target, drafter, seqs)
    with pytest.raises(ValueError, match="cannot resume") as refused:
        trainer.resume()
    message = str(refused.value)
    assert "training data fingerprint (sha256 of the sequences' token ids and loss starts)" in message
    assert ("training sequences: 3 in the checkpoint, 2 now" in message) == (len(seqs) == 2)
    assert ("seed: 0 in the checkpoint, 1 now" in message) == (change == "with other settings")
    assert afresh_command(config) in message and "--no_resume" in message
    assert trainer.state["step"] == 0 and unchanged(drafter, before)  # refused before anything was loaded


def test_a_run_on_an_edited_data_file_refuses_to_resume(tmp_path):
    """The data file edited and its cache rebuilt: the same settings, other sequences."""
    saved_run_inputs(tmp_path)
    settings = tiny_run_settings(tmp_path)
    run(DistillationConfig(**settings))
    data = tmp_path / "data.jsonl"
    items = [json.loads(line) for line in data.read_text().splitlines()]
    items[0]["ids"][12] = 3 if items[0]["ids"][12] != 3 else 4  # one token of a reply
    data.write_text("\n".join(json.dumps(item) for item in items))
    for cached in (tmp_path / "run" / "data").iterdir():
        cached.unlink()
    with pytest.raises(ValueError, match=r"cannot resume[\s\S]*training data fingerprint") as refused:
        run(DistillationConfig(**{**settings, "num_steps": 3}))
    assert "--no_resume" in str(refused.value)
    run(DistillationConfig(**{**settings, "num_steps": 3, "resume": False}))  # the command it gives: starts afresh


def test_an_old_checkpoint_without_a_fingerprint_resumes_and_says_so(tmp_path, caplog):
    config, target, drafter, seqs = trained(tmp_path)
    path = tmp_path / "checkpoint" / "trainer_state.json"
    state = json.loads(path.read_text())
    del state["data"]
    path.write_text(json.dumps(state))
    caplog.set_level(logging.WARNING)
    trainer = DrafterTrainer(replace(config, num_steps=3), target, drafter, seqs)
    assert trainer.resume() and trainer.state["step"] == 2
    assert "records no fingerprint of its training data" in caplog.text
    trainer.train()
    assert json.loads(path.read_text())["data"]["sequences"] == 3  # recorded from now on


def cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def rewrite_state(**fields):
    def damage(folder: Path) -> None:
        state = json.loads((folder / "trainer_state.json").read_text())
        (folder / "trainer_state.json").write_text(json.dumps({**state, **fields}))

    return damage


DAMAGE = {  # what is done to the checkpoint folder, and the file the refusal names
    "state not JSON": (lambda f: (f / "trainer_state.json").write_text("{step: 2"), "trainer_state.json"),
    "state cut short": (lambda f: cut_short(f / "trainer_state.json"), "trainer_state.json"),
    "state a list": (lambda f: (f / "trainer_state.json").write_text("[2]"), "trainer_state.json"),
    "arguments a list": (rewrite_state(arguments=["--seed", "0"]), "trainer_state.json"),
    "arguments a string": (rewrite_state(arguments="--seed 0"), "trainer_state.json"),
    "step a string": (rewrite_state(step="2"), "trainer_state.json"),
    "data a number": (rewrite_state(data=3), "trainer_state.json"),
    "weights cut short": (lambda f: cut_short(f / "model.safetensors"), "model.safetensors"),
    "weights missing": (lambda f: (f / "model.safetensors").unlink(), "model.safetensors"),
    "optimizer cut short": (lambda f: cut_short(f / "optimizer.safetensors"), "optimizer.safetensors"),
    "optimizer missing": (lambda f: (f / "optimizer.safetensors").unlink(), "optimizer.safetensors"),
    "optimizer groups not JSON": (lambda f: (f / "optimizer_groups.json").write_text("{"), "optimizer_groups.json"),
    "optimizer groups a string": (lambda f: (f / "optimizer_groups.json").write_text('"x"'), "optimizer_groups.json"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_checkpoint_is_refused_naming_the_file_and_the_command_that_starts_afresh(tmp_path, damage):
    config, target, drafter, seqs = trained(tmp_path)
    spoil, name = DAMAGE[damage]
    spoil(tmp_path / "checkpoint")
    before = weights(drafter)
    trainer = DrafterTrainer(config, target, drafter, seqs)
    with pytest.raises(DamagedCheckpoint) as refused:
        trainer.resume()
    message = str(refused.value)
    assert isinstance(refused.value, ValueError)
    assert str(tmp_path / "checkpoint" / name) in message
    assert afresh_command(config) in message and afresh_command(config).endswith("--no_resume")
    assert trainer.state["step"] == 0 and unchanged(drafter, before)  # nothing of it was loaded
    assert DrafterTrainer(replace(config, resume=False), target, drafter, seqs).train()["step"] == 2  # afresh


def test_a_skip_mode_run_whose_every_step_is_non_finite_ends_with_an_error(tmp_path):
    config, target, drafter, seqs = tiny_setup(tmp_path, steps=3, save_every=3)
    for seq in seqs:
        seq.features[3, 0] = float("nan")
    trainer = DrafterTrainer(replace(config, nonfinite="skip"), target, drafter, seqs)
    with pytest.raises(NonFiniteError, match=r"every one of the 3 steps was non-finite and skipped") as stopped:
        trainer.train()
    assert "have non-finite target features" in str(stopped.value) and "--no_resume" in str(stopped.value)
    assert len(trainer.state["skipped_steps"]) == 3
