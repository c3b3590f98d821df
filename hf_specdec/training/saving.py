"""What a finished run leaves in output_dir: the drafter (in the target's dtype), with LoRA also the adapter alone,
for a head trained on a PARD drafter also the head alone, and training_log.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..models.attach import save_head
from ..models.registry import capabilities_of, head_of
from .config import DrafterTrainingConfig
from .counters import COUNTERS
from .trainer import DrafterTrainer


def training_log(trainer: DrafterTrainer, resumed: bool) -> dict:
    """What training_log.json records, for every objective: whether the run resumed, its objective, steps and time;
    every counter (`COUNTERS`; supervised_tokens under the trainer's `supervised_key`); the data and the trained
    parameters; the trainer's own figures (`log_extras`); the loss curve; the target's device and dtype; and
    `adjustments`, sentences on settings the run could not use as given (what was asked, what was used, why)."""
    state = trainer.state
    counters = {trainer.supervised_key if name == "supervised_tokens" else name: state[name] for name in COUNTERS}
    return {
        "resumed": bool(resumed),
        "objective": trainer.objective,
        "steps": state["step"],
        "train_seconds": state["elapsed_s"],
        **counters,
        "sequences": len(trainer.sequences),
        "sequence_tokens": sum(int(s.ids.shape[0]) for s in trainer.sequences),
        "trainable_parameters": sum(p.numel() for p in trainer.drafter.parameters() if p.requires_grad),
        "processes": trainer.processes.num_processes,
        **trainer.log_extras(),
        "losses": state["losses"],
        "device": str(trainer.target.device),
        "dtype": str(trainer.target.dtype),
        "adjustments": list(trainer.adjustments),
    }


def save_drafter(config: DrafterTrainingConfig, trainer: DrafterTrainer, adapters=None) -> Path:
    """The trained drafter in the target's dtype to output_dir/drafter. With LoRA `adapters` the adapter alone goes
    to output_dir/adapter and the merged drafter to output_dir/drafter. A head trained on a PARD drafter also goes
    alone to output_dir/head (its config names the PARD drafter it was trained on, relative to that folder)."""
    drafter, out = trainer.drafter, Path(config.output_dir) / "drafter"
    if adapters is not None:
        from ..hub.adapter_card import write_adapter_card
        from .lora import merge_lora, save_adapter

        save_adapter(adapters, Path(config.output_dir) / "adapter")
        if capabilities_of(adapters.get_base_model()).adapter_folders:  # PARD: config + adapter load as a drafter
            drafter.save_adapter_folder(Path(config.output_dir) / "adapter")
        write_adapter_card(Path(config.output_dir) / "adapter")  # our card, not peft's empty template
        drafter = merge_lora(adapters)
    drafter.requires_grad_(True)  # heads were trained with a frozen backbone; the saved model is whole
    drafter.to(trainer.target.dtype)
    if head_of(drafter) is not None and capabilities_of(drafter).head_only_saving and config.drafter:
        head = Path(config.output_dir) / "head"  # a head on a large base: also the head alone
        under = Path(config.drafter)
        backbone = os.path.relpath(under.resolve(), head.resolve()) if under.is_dir() else config.drafter
        save_head(drafter, head, backbone=backbone)
    drafter.save_pretrained(out)
    return out


def save_run(config: DrafterTrainingConfig, trainer: DrafterTrainer, resumed: bool, adapters=None) -> Path:
    """The drafter (and adapter) and output_dir/training_log.json; returns the drafter's folder."""
    log = training_log(trainer, resumed)  # before merging: the trainable parameters are the trained ones
    out = save_drafter(config, trainer, adapters)
    (Path(config.output_dir) / "training_log.json").write_text(json.dumps(log, indent=1))
    return out


__all__ = ["save_drafter", "save_run", "training_log"]
