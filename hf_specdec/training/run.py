"""The one training entry, `run(config)`, used by scripts/train_drafter.py, train_corrector.py and train_mixture.py.

The config's class is the objective and picks the trainer (`TRAINERS`); the run is the same for all of them:
frozen target, drafter, cached training sequences (draft vocabulary and LoRA adapters when asked), trainer,
resume, train, save, log, publish.
"""

from __future__ import annotations

from pathlib import Path

from accelerate import PartialState

from .config import (
    CorrectorTrainingConfig,
    DFlashConfig,
    DrafterTrainingConfig,
    MixtureTrainingConfig,
    PardTrainingConfig,
    SequentialOPDConfig,
    SpecOPDConfig,
)
from .dblast import MixtureTrainer
from .dcoco import CorrectorTrainer
from .pard import PardTrainer
from .publishing import publish
from .saving import save_run
from .sequences import frequent_labels, prepare_sequences
from .sequential_opd import SequentialOPDTrainer
from .specopd import SpecOPDTrainer
from .target import load_target
from .trainer import DrafterTrainer

TRAINERS: dict[type[DrafterTrainingConfig], type[DrafterTrainer]] = {
    DrafterTrainingConfig: DrafterTrainer,
    DFlashConfig: DrafterTrainer,
    SpecOPDConfig: SpecOPDTrainer,
    SequentialOPDConfig: SequentialOPDTrainer,
    CorrectorTrainingConfig: CorrectorTrainer,
    MixtureTrainingConfig: MixtureTrainer,
    PardTrainingConfig: PardTrainer,
}


def trainer_class(config: DrafterTrainingConfig) -> type[DrafterTrainer]:
    """The trainer of `config`'s objective: that of the nearest of its classes in `TRAINERS`."""
    classes = type(config.for_objective()).__mro__
    return next(TRAINERS[cls] for cls in classes if cls in TRAINERS)


def set_up(config: DrafterTrainingConfig):
    """The trainer of a run (target, drafter, cached sequences) and the drafter's LoRA adapters (None without)."""
    trainer_cls = trainer_class(config)
    target, tokenizer = load_target(config)
    drafter = trainer_cls.build_drafter(config, target)
    # one process writes the data cache, the others then read it
    with PartialState(cpu=target.device.type == "cpu").main_process_first():
        sequences = prepare_sequences(config, target, tokenizer, drafter.config.target_layer_ids)
    if config.draft_vocab_size and drafter.draft_vocab is None:
        drafter.set_draft_vocab(frequent_labels(sequences, config.draft_vocab_size))
    adapters = None
    if config.lora_rank:
        from .lora import add_lora

        adapters = add_lora(drafter, config, config.drafter)
    return trainer_cls.for_run(config, target, drafter, sequences), adapters


def run(config: DrafterTrainingConfig) -> Path:
    """Train the drafter of `config`'s objective and save it (target dtype) to output_dir/drafter, with LoRA also
    the adapter alone to output_dir/adapter; write output_dir/training_log.json; publish when `push_to_hub` is set.
    A killed run started again with the same config resumes from output_dir/checkpoint and ends as an uninterrupted
    one; with `export_only` it saves the checkpoint's drafter as it is (a long run's progress, mid-way). Runs under
    `accelerate launch` too (only the main process writes)."""
    config = config.for_objective()
    trainer, adapters = set_up(config)
    resumed = config.resume and trainer.resume()
    if config.export_only and not resumed:
        raise ValueError(f"export_only: {config.output_dir}/checkpoint holds no checkpoint to save the drafter from")
    if not config.export_only:
        trainer.train()
    out = Path(config.output_dir) / "drafter"
    if not trainer.processes.is_main_process:
        return out
    save_run(config, trainer, resumed, adapters)
    if config.push_to_hub:
        publish(config, out)
    return out


__all__ = ["TRAINERS", "run", "set_up", "trainer_class"]
