"""The one training entry, `run(config)`, used by scripts/train_drafter.py, train_dcoco_head.py and
train_dblast_head.py.

The config's class is the objective and picks the trainer (`TRAINERS`); the run is the same for all of them:
frozen target, drafter, cached training sequences (draft vocabulary and LoRA adapters when asked), trainer,
resume, train, save, log, publish. What needs no model (the corpora's data packages, publishing) is checked first.
The run reports on the "hf_specdec.training" logger (`summary.show_run_messages` prints it): how it starts, what it
adjusted, the summary it ends with, where it published.
"""

from __future__ import annotations

import time
from pathlib import Path

from accelerate import PartialState

from ..models.target_features import drafter_layer_ids
from .checkpoint import find_checkpoint
from .commands import resume_command
from .config import (
    DBLASTHeadTrainingConfig,
    DCOCOHeadTrainingConfig,
    DFlashConfig,
    DrafterTrainingConfig,
    PardTrainingConfig,
    SequentialOPDConfig,
    SpecOPDConfig,
)
from .corpora import check_corpora
from .dblast import DBLASTHeadTrainer
from .dcoco import DCOCOHeadTrainer
from .interrupts import TrainingInterrupted
from .pard import PardTrainer
from .pard_specopd import PardSpecOPDTrainer, names_a_pard_drafter
from .publishing import check_publishing, publish, published_message
from .saving import save_run
from .sequences import data_adjustments, data_folder, frequent_labels, prepare_sequences
from .sequential_opd import SequentialOPDTrainer
from .specopd import SpecOPDTrainer
from .summary import logger, run_summary, start_message
from .target import load_target
from .trainer import DrafterTrainer

TRAINERS: dict[type[DrafterTrainingConfig], type[DrafterTrainer]] = {
    DrafterTrainingConfig: DrafterTrainer,
    DFlashConfig: DrafterTrainer,
    SpecOPDConfig: SpecOPDTrainer,
    SequentialOPDConfig: SequentialOPDTrainer,
    DCOCOHeadTrainingConfig: DCOCOHeadTrainer,
    DBLASTHeadTrainingConfig: DBLASTHeadTrainer,
    PardTrainingConfig: PardTrainer,
}


def trainer_class(config: DrafterTrainingConfig) -> type[DrafterTrainer]:
    """The trainer of `config`'s objective: that of the nearest of its classes in `TRAINERS`; SpecOPD on a PARD
    drafter (`--drafter` names one) has its own."""
    classes = type(config.for_objective()).__mro__
    trainer = next(TRAINERS[cls] for cls in classes if cls in TRAINERS)
    if trainer is SpecOPDTrainer and names_a_pard_drafter(config.drafter):
        return PardSpecOPDTrainer
    if trainer is SequentialOPDTrainer and names_a_pard_drafter(config.drafter):
        raise ValueError(
            f"--objective sequential_opd rolls out a block drafter's passes; --drafter {config.drafter} is a PARD "
            "drafter. Train it on its own policy with --objective specopd (one tree-masked target pass per "
            "sequence), or teacher-forced with --objective pard"
        )
    return trainer


def check_before_loading(config: DrafterTrainingConfig) -> None:
    """What can fail without a model, checked before any loads: the corpora's data packages (unless the data is
    already cached) and, with push_to_hub, publishing (`check_publishing`)."""
    cached = (data_folder(config) / "index.json").exists()
    if config.data_file is None and not cached:
        check_corpora(config.corpus)
    check_publishing(config)


def draft_vocabulary(config: DrafterTrainingConfig, drafter, sequences) -> list[str]:
    """Give a drafter without one the `draft_vocab_size` most frequent labels; sentences on what differs from the
    size asked (fewer distinct labels in the data, or a drafter that already has its vocabulary)."""
    asked = config.draft_vocab_size
    if not asked:
        return []
    if drafter.draft_vocab is not None:
        return [
            f"--draft_vocab_size {asked} asked, {len(drafter.draft_vocab)} used: the drafter from --drafter already "
            "scores a draft vocabulary of that size, which is kept."
        ]
    labels = frequent_labels(sequences, asked)
    drafter.set_draft_vocab(labels)
    if len(labels) >= asked:
        return []
    return [
        f"--draft_vocab_size {asked} asked, {len(labels)} used: the training data holds only {len(labels)} distinct "
        "label tokens, and the draft vocabulary is drawn from them (more data, e.g. a larger --num_prompts, gives "
        "a larger one)."
    ]


def set_up(config: DrafterTrainingConfig):
    """The trainer of a run (target, drafter, cached sequences) and the drafter's LoRA adapters (None without); the
    trainer's `adjustments` say what the data and the draft vocabulary gave other than asked."""
    trainer_cls = trainer_class(config)
    target, tokenizer = load_target(config)
    drafter = trainer_cls.build_drafter(config, target)
    # one process writes the data cache, the others then read it
    with PartialState(cpu=target.device.type == "cpu").main_process_first():
        sequences = prepare_sequences(config, target, tokenizer, drafter_layer_ids(drafter.config, target.config))
    adjustments = data_adjustments(config, sequences) + draft_vocabulary(config, drafter, sequences)
    adapters = None
    if config.lora_rank:
        from .lora import add_lora, continued_lora_adjustments

        continued = trainer_cls.adapter_to_continue(config)
        adapters = add_lora(drafter, config, config.drafter, continue_from=continued)
        adjustments += continued_lora_adjustments(config, continued) if continued else []
    trainer = trainer_cls.for_run(config, target, drafter, sequences)
    trainer.adjustments = adjustments
    return trainer, adapters


def run(config: DrafterTrainingConfig) -> Path:
    """Train the drafter of `config`'s objective and save it (target dtype) to output_dir/drafter, with LoRA also
    the adapter alone to output_dir/adapter; write output_dir/training_log.json; publish when `push_to_hub` is set.
    A killed run started again with the same config resumes from output_dir/checkpoint and ends as an uninterrupted
    one; with `export_only` it saves the checkpoint's drafter as it is (a long run's progress, mid-way). Runs under
    `accelerate launch` too (only the main process writes).

    Refused before any model loads: a corpus whose data package is missing, and with `push_to_hub` what would make
    publishing fail (`check_publishing`). Ctrl-C raises `TrainingInterrupted`, whose message has the command that
    resumes (during training, after a checkpoint of the last completed step)."""
    began = time.perf_counter()
    config = config.for_objective()
    check_before_loading(config)
    try:
        trainer, adapters = set_up(config)
    except KeyboardInterrupt:
        raise TrainingInterrupted(
            f"stopped before training began (Ctrl-C); the data computed so far is kept in {data_folder(config)}. "
            f"Continue with:\n  {resume_command(config)}"
        ) from None
    main = trainer.processes.is_main_process
    seen = find_checkpoint(trainer.checkpoint_dir) is not None
    resumed = config.resume and trainer.resume()
    if config.export_only and not resumed:
        raise ValueError(f"export_only: {config.output_dir}/checkpoint holds no checkpoint to save the drafter from")
    resumed_at = trainer.state["step"] if resumed else None
    if main:
        for note in trainer.adjustments:
            logger.warning("note: %s", note)
        if config.export_only:
            logger.info(f"--export_only: saving the drafter of {trainer.checkpoint_dir} (step {resumed_at}) as it is")
        else:
            logger.info(start_message(config, trainer, resumed, seen))
    if not config.export_only:
        trainer.train()
    out = Path(config.output_dir) / "drafter"
    if not main:
        return out
    save_run(config, trainer, resumed, adapters)
    logger.info(run_summary(config, trainer, out, resumed_at, time.perf_counter() - began))
    if config.push_to_hub:
        logger.info(published_message(config.push_to_hub, publish(config, out)))
    return out


__all__ = ["TRAINERS", "run", "set_up", "trainer_class"]
