"""DFlash-objective training of a block drafter on cached target features (the target stays frozen)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F
from accelerate import Accelerator, PartialState
from accelerate.utils import reduce
from torch import nn
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from ..models.attach import attach_head
from ..models.block_drafter.modeling_block_drafter import BlockDrafter
from ..models.loading import load_drafter
from ..models.registry import capabilities_of, head_of
from .checkpoint import (
    MAY_CHANGE_ON_RESUME,
    DamagedCheckpoint,
    NonFiniteError,
    TrainableOnly,
    argument_changes,
    find_checkpoint,
    load_checkpoint,
    read_trainer_state,
    run_arguments,
    save_checkpoint,
)
from .commands import afresh_command, resume_command
from .config import DrafterTrainingConfig
from .counters import zero_counters
from .data import TrainingSequence
from .fingerprint import data_changes, data_fingerprint
from .interrupts import StopAtStepEnd, TrainingInterrupted
from .losses import default_gamma, dflash_decayed_cross_entropy
from .packing import pack_blocks, sample_anchors

logger = logging.getLogger(__name__)


class DrafterTrainer:
    """Trains `drafter` against `target` on `sequences`; checkpoints every `save_every` steps and resumes exactly.

    Each step's randomness (which sequences, which anchors) comes from a torch.Generator seeded with (seed, step), so a
    run resumed from a checkpoint takes the same steps as one that never stopped. Each checkpoint records the run's
    arguments and a fingerprint of its training sequences (`fingerprint.py`), and resuming with arguments that would
    change the result, or on other data, is refused with the list of what differs (`checkpoint.MAY_CHANGE_ON_RESUME`:
    the arguments that may change, such as a larger num_steps or save_every). A damaged checkpoint is refused with
    the file and the command that starts afresh.

    A step whose loss or gradient norm is not finite changes nothing (no optimizer step, no checkpoint): with
    `nonfinite="stop"` the run raises `NonFiniteError` naming the step and its sequences, and the last checkpoint,
    written from finite weights, stays; with "skip" the step is logged, recorded in state["skipped_steps"] and the run
    goes on, and a run whose every step was skipped ends with `NonFiniteError` (nothing was trained).

    Ctrl-C (SIGINT) lets the step under way finish, writes a checkpoint of it and raises `TrainingInterrupted`
    with the command that resumes (a second Ctrl-C stops at once); a KeyboardInterrupt raised otherwise is a crash.

    What `hf_specdec.training.run.run` asks of a trainer class: `build_drafter` (the drafter it trains),
    `adapter_to_continue` (a saved LoRA adapter that training goes on with instead of new adapters), `for_run`
    (the trainer, with any data of its own), `objective` and `supervised_key` (names in the training log),
    `log_extras` (figures of its own for the log) and `loss_term_postfix` (named loss terms for the progress bar).
    """

    objective: ClassVar[str] = "dflash"
    supervised_key: ClassVar[str] = "supervised_tokens"  # the training log's name of the supervised_tokens counter

    @classmethod
    def adapter_to_continue(cls, config: DrafterTrainingConfig) -> str | None:
        """The saved adapter folder whose adapters a LoRA run trains on (None: new adapters on the drafter). A block
        drafter's adapter folder names the drafter under it, so new adapters on the merged drafter load back
        through it and this is None."""
        return None

    @classmethod
    def build_drafter(cls, config: DrafterTrainingConfig, target: PreTrainedModel) -> BlockDrafter:
        """The drafter to train, in float32 (master weights): loaded from `config.drafter` or fresh for the target."""
        if config.drafter:
            drafter = load_drafter(config.drafter, dtype=torch.float32)
        else:
            torch.manual_seed(config.seed)
            extra = {"intermediate_size": config.intermediate_size} if config.intermediate_size else {}
            drafter = BlockDrafter.for_target(
                target,
                mask_token_id=config.mask_token_id,
                block_size=config.block_size,
                num_hidden_layers=config.num_hidden_layers,
                num_target_taps=config.num_target_taps,
                target_name_or_path=config.target,
                **extra,
            )
        return drafter.to(device=target.device, dtype=torch.float32)

    @classmethod
    def for_run(
        cls,
        config: DrafterTrainingConfig,
        target: PreTrainedModel,
        drafter: BlockDrafter,
        sequences: list[TrainingSequence],
    ) -> DrafterTrainer:
        """The trainer of a whole run (subclasses that need more data than the sequences prepare it here)."""
        return cls(config, target, drafter, sequences)

    def __init__(
        self,
        config: DrafterTrainingConfig,
        target: PreTrainedModel,
        drafter: BlockDrafter,
        sequences: list[TrainingSequence],
    ) -> None:
        if not sequences:
            raise ValueError("no training sequences: check the data source (each needs >= 2 supervised tokens)")
        self.config, self.target, self.drafter, self.sequences = config, target, drafter, sequences
        self.target.requires_grad_(False)
        self.drafter.train()
        # what the drafter's base declares: a causal LM (PARD) reads its own embeddings, a block drafter the target's
        self.capabilities = capabilities_of(drafter)
        own = self.capabilities.own_embeddings
        self.embed = drafter.get_input_embeddings() if own else target.get_input_embeddings()
        head = target.get_output_embeddings()
        self.head_weight = drafter.head_weight(head).detach()  # (Vd, H) frozen target rows the drafter scores
        self.label_index = None  # full id -> draft-vocabulary index (-100 outside it)
        if drafter.draft_vocab is not None:
            self.label_index = torch.full(
                (head.weight.shape[0],), -100, dtype=torch.long, device=self.head_weight.device
            )
            self.label_index[drafter.draft_vocab.to(self.label_index.device)] = torch.arange(
                len(drafter.draft_vocab), device=self.label_index.device
            )
        self.device = next(drafter.parameters()).device
        self.gamma = config.gamma or default_gamma(drafter.config.block_size)
        # bf16 targets: run the drafter's matmuls in bf16 too (float32 master weights and optimizer state)
        self.autocast = (target.dtype if own else self.head_weight.dtype) == torch.bfloat16
        params = [p for p in drafter.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=config.learning_rate, betas=(0.9, 0.95), weight_decay=config.weight_decay
        )
        self.checkpoint_dir = Path(config.output_dir) / "checkpoint"
        cpu = self.device.type == "cpu"
        self.processes = PartialState(cpu=cpu)  # one process, or one of `accelerate launch`'s (gloo on CPU)
        self.step_loss = StepLoss(self)
        if self.processes.num_processes > 1:  # DDP: gradients averaged over processes
            self.step_loss = Accelerator(cpu=cpu).prepare_model(self.step_loss)
        self.state = {"step": 0, "losses": [], "elapsed_s": 0.0, "skipped_steps": [], **zero_counters()}
        self.state["arguments"] = run_arguments(config)  # saved with every checkpoint: what a resume must match
        self.state["data"] = data_fingerprint(sequences)  # and the training data it must match
        self.adjustments: list[str] = []  # settings the run could not use as given, as sentences (training_log.json)

    def log_extras(self) -> dict:
        """Figures of this trainer's own for training_log.json (next to the counters every trainer keeps)."""
        return {}

    def loss_term_postfix(self) -> dict[str, str]:
        """The last step's named loss terms for the progress bar (none: the loss is one term)."""
        return {}

    def learning_rate(self, step: int) -> float:
        """Linear warm-up, then cosine decay to 10% of the peak."""
        total, warm = self.config.num_steps, max(1, int(self.config.warmup_ratio * self.config.num_steps))
        if step < warm:
            return self.config.learning_rate * (step + 1) / warm
        progress = (step - warm) / max(1, total - warm)
        return self.config.learning_rate * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))

    def packed_pass(self, seq: TrainingSequence, rng: torch.Generator):
        """Random anchors of one sequence, their packed blocks (labels, anchor ids), and the drafter's (n, K, H)
        states of them: what its base gives a head at each anchor (`anchor_states`, a base method)."""
        K, T = self.drafter.config.block_size, seq.ids.shape[0]
        anchors = sample_anchors(T, seq.loss_start, K, self.config.anchors_per_sequence, rng)
        packed = pack_blocks(
            seq.ids, anchors, K, self.drafter.config.mask_token_id, seq.loss_start, self.drafter.dtype, seq.next_tokens
        )
        return anchors, packed, self.drafter.anchor_states(seq.ids, seq.features, anchors, self.embed)

    def slot_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(…, Vd) the drafter's scores of (…, H) slot states: the head rows it scores, selected once while they are
        frozen; a base with its own LM head whose head trains (full fine-tuning) scores with it as it is now."""
        if self.capabilities.own_embeddings and self.drafter.get_output_embeddings().weight.requires_grad:
            weight = self.drafter.head_weight()  # (Vd, H), part of the graph
            return F.linear(hidden.to(weight.dtype), weight)
        return F.linear(hidden.to(self.head_weight.dtype), self.head_weight)

    def sequence_loss(self, seq: TrainingSequence, rng: torch.Generator) -> tuple[torch.Tensor, int]:
        """DFlash loss of one sequence's packed blocks, and how many labels it had."""
        _, packed, hidden = self.packed_pass(seq, rng)
        logits = self.slot_logits(hidden)  # (n, K, Vd)
        labels = packed.labels.to(self.device)
        if self.label_index is not None:
            labels = torch.where(labels == -100, labels, self.label_index.to(self.device)[labels.clamp_min(0)])
        loss = dflash_decayed_cross_entropy(logits, labels, self.gamma)
        return loss, int((labels != -100).sum())

    def pick_rng(self, step: int, position: int) -> torch.Generator:
        """The randomness of the step's `position`-th sequence: the same in any process layout."""
        return torch.Generator().manual_seed((self.config.seed * 1_000_003 + step) * 1009 + position)

    def step_picks(self, step: int) -> list[int]:
        """Indices of the step's sequences, all processes together (batch_size per process)."""
        rng = torch.Generator().manual_seed(self.config.seed * 1_000_003 + step)
        total = self.config.batch_size * self.processes.num_processes
        return torch.randint(len(self.sequences), (total,), generator=rng).tolist()

    def train_step(self) -> float:
        """One optimizer step; its mean loss. A non-finite loss or gradient norm applies nothing (`nonfinite_step`)."""
        step = self.state["step"]
        picks = self.step_picks(step)
        rank, world = self.processes.process_index, self.processes.num_processes
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate(step)
        self.optimizer.zero_grad(set_to_none=True)
        loss, labelled = self.step_loss(step, list(range(rank, len(picks), world)), picks)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.drafter.parameters(), self.config.max_grad_norm))
        totals = torch.tensor([float(loss.detach()), float(labelled)], dtype=torch.float64)
        if world > 1:  # the global step: mean loss, all processes' supervised tokens (the same decision everywhere)
            totals = reduce(totals.to(self.processes.device), reduction="sum").cpu()
            totals[0] /= world
        if not (math.isfinite(float(totals[0])) and math.isfinite(grad_norm)):
            self.nonfinite_step(step, picks, float(totals[0]), grad_norm)
            return math.nan
        self.optimizer.step()
        self.state["supervised_tokens"] += int(totals[1])
        return float(totals[0])

    def nonfinite_step(self, step: int, picks: list[int], loss: float, grad_norm: float) -> None:
        """Leave the weights as they are, then raise `NonFiniteError` (nonfinite="stop") or log and record the step
        (nonfinite="skip"). The message names the step (1-based, as in the loss log), its sequences (indices into
        the training sequences) and, among them, those whose target features hold a nan or an inf."""
        self.optimizer.zero_grad(set_to_none=True)
        what = f"loss {loss}" if not math.isfinite(loss) else f"gradient norm {grad_norm} (loss {loss:.4f})"
        bad_data = [i for i in sorted(set(picks)) if not bool(torch.isfinite(self.sequences[i].features).all())]
        data = f"; sequences {bad_data} have non-finite target features" if bad_data else ""
        where = f"step {step + 1} of {self.config.num_steps}: non-finite {what} on training sequences {picks}{data}"
        if self.config.nonfinite == "skip":
            logger.warning("%s; the step is skipped (nonfinite='skip'), the weights are unchanged", where)
            self.state["skipped_steps"].append([step + 1, picks])
            return
        kept = find_checkpoint(self.checkpoint_dir)
        checkpoint = f"the last checkpoint ({kept}) is kept" if kept else "no checkpoint was written yet"
        raise NonFiniteError(
            f"{where}. Nothing of this step was applied and {checkpoint}. Fix or remove those sequences (data_file, "
            "data_dir), or lower learning_rate; or set nonfinite='skip' (--nonfinite skip) to skip such steps, and "
            "start the run again: it resumes from the checkpoint."
        )

    def check_arguments(self, recorded: dict | None, data: dict | None = None) -> None:
        """Refuse to continue a checkpoint whose `recorded` arguments differ from this run's in one that changes the
        result, or whose recorded `data` fingerprint is not that of this run's sequences, with the list of what
        differs; a checkpoint from before arguments (or the data's fingerprint) were recorded is continued, with a
        warning (a log line)."""
        changes = []
        if recorded is None:
            logger.warning("checkpoint in %s records no run arguments; resuming unchecked", self.checkpoint_dir)
        else:
            changes += argument_changes(recorded, self.config)
        if data is None:
            logger.warning(
                "checkpoint in %s records no fingerprint of its training data (written before fingerprints were "
                "recorded); resuming without checking that the data is the same",
                self.checkpoint_dir,
            )
        else:
            changes += data_changes(data, data_fingerprint(self.sequences))
        if changes:
            raise ValueError(
                f"cannot resume {self.checkpoint_dir}: it was written with other arguments or other training data, "
                "which would change the result:\n  " + "\n  ".join(changes) + "\nRun again with the checkpoint's "
                "arguments and data, or start afresh in a new --output_dir (or with --no_resume, which overwrites "
                "this checkpoint):\n  " + afresh_command(self.config, self.processes.num_processes) + "\nArguments "
                "that may change on resume: " + ", ".join(sorted(MAY_CHANGE_ON_RESUME)) + " (num_steps may only grow)."
            )

    def resume(self) -> bool:
        """Load the last checkpoint in output_dir if there is one; True when training continues from it. ValueError
        (before anything is loaded) if the checkpoint was written with arguments that change the result or on other
        training data, or if a file of it is damaged (`DamagedCheckpoint`: the file, and the command that starts
        afresh)."""
        found = find_checkpoint(self.checkpoint_dir)
        if found is None:
            return False
        try:
            recorded = read_trainer_state(found)
            self.check_arguments(recorded.get("arguments"), recorded.get("data"))
            self.state = {**self.state, **load_checkpoint(found, self.checkpointed(), self.optimizer)}
        except DamagedCheckpoint as err:
            raise DamagedCheckpoint(
                f"cannot resume from {found}: {err}. Start afresh (this checkpoint is overwritten; or keep it by "
                f"moving {found} aside first):\n  {afresh_command(self.config, self.processes.num_processes)}"
            ) from None
        self.state["arguments"] = run_arguments(self.config)
        self.state["data"] = data_fingerprint(self.sequences)
        return True

    def save(self) -> None:
        if not self.processes.is_main_process:
            return
        save_checkpoint(self.checkpoint_dir, self.checkpointed(), self.optimizer, self.state)

    def checkpointed(self):
        """What a checkpoint holds: the whole drafter, or for a base whose heads are saved alone (a frozen 0.5B LM
        under a head) its trainable parameters only (`TrainableOnly`)."""
        return TrainableOnly(self.drafter) if self.capabilities.head_only_saving else self.drafter

    def train(self, on_step_end: Callable[[int, float], None] | None = None) -> dict:
        """Run to `num_steps`, checkpointing on the way; returns the trainer state (losses, time, tokens).

        Refuses (ValueError) a state resumed from a checkpoint of other arguments, whichever way it was loaded; raises
        `NonFiniteError` at a non-finite step unless config.nonfinite is "skip" (skipped steps log no loss)."""
        data = data_fingerprint(self.sequences)
        if self.state.get("arguments") != run_arguments(self.config) or self.state.get("data") != data:
            self.check_arguments(self.state.get("arguments"), self.state.get("data"))
            self.state["arguments"], self.state["data"] = run_arguments(self.config), data
        bar = tqdm(
            total=self.config.num_steps,
            initial=self.state["step"],
            desc="train drafter",
            unit="step",
            disable=not self.processes.is_main_process,
        )
        with StopAtStepEnd() as interrupt:
            while self.state["step"] < self.config.num_steps:
                start = time.perf_counter()
                loss = self.train_step()
                self.state["step"] += 1
                self.state["elapsed_s"] += time.perf_counter() - start
                if math.isfinite(loss):
                    self.state["losses"].append([self.state["step"], loss])
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}", **self.loss_term_postfix())
                step = self.state["step"]
                saved = step % self.config.save_every == 0 or step == self.config.num_steps
                if saved:
                    self.save()
                if on_step_end is not None:
                    on_step_end(step, loss)
                if step < self.config.num_steps and self.stop_requested(interrupt):
                    bar.close()
                    if not saved:
                        self.save()
                    raise self.interrupted()
        bar.close()
        self.check_trained()
        return self.state

    def check_trained(self) -> None:
        """`NonFiniteError` when every step of the run was non-finite and skipped (nonfinite="skip"): the weights
        are those it started from, and a run that trained nothing must not end as a success."""
        skipped, steps = self.state.get("skipped_steps", []), self.state["step"]
        if steps == 0 or len(skipped) < steps:
            return
        picked = sorted({i for _, picks in skipped for i in picks})
        bad = [i for i in picked if not bool(torch.isfinite(self.sequences[i].features).all())]
        data = f"; sequences {bad} have non-finite target features" if bad else ""
        raise NonFiniteError(
            f"every one of the {steps} steps was non-finite and skipped (nonfinite='skip'): nothing was trained, and "
            f"no drafter is saved (training sequences picked: {picked[:20]}{' ...' if len(picked) > 20 else ''}"
            f"{data}). Fix or remove those sequences (data_file, data_dir), or lower learning_rate, then start "
            f"afresh:\n  {afresh_command(self.config, self.processes.num_processes)}"
        )

    def stop_requested(self, interrupt: StopAtStepEnd) -> bool:
        """Whether Ctrl-C was pressed in any process (all of them then stop after the same step)."""
        if self.processes.num_processes == 1:
            return interrupt.requested
        flag = torch.tensor([float(interrupt.requested)], device=self.processes.device)
        return bool(reduce(flag, reduction="sum").item() > 0)

    def interrupted(self) -> TrainingInterrupted:
        """The stop after a Ctrl-C: what was kept and the command that resumes."""
        step, total = self.state["step"], self.config.num_steps
        return TrainingInterrupted(
            f"stopped at step {step} of {total} (Ctrl-C); checkpoint written to {self.checkpoint_dir}. "
            f"Resume with:\n  {resume_command(self.config, self.processes.num_processes)}"
        )


def load_with_head(config, head: str, **shape) -> PreTrainedModel:
    """The drafter a head trainer trains (float32): `config.drafter` as saved when it already carries `head`,
    else that drafter (any base) with a fresh `head` of `shape` (seeded by `config.seed`)."""
    drafter = load_drafter(config.drafter, dtype=torch.float32)
    carried = head_of(drafter)
    if carried is not None and carried.name == head:
        return drafter
    torch.manual_seed(config.seed)
    return attach_head(drafter, head, **shape)


class StepLoss(nn.Module):
    """The loss of one process's share of a step, as a module, so DDP (`accelerate launch`) can wrap it: every
    trained parameter (backbone, LoRA adapters, DCOCO/DBLAST heads) is used inside its forward, and the frozen target
    is not a submodule."""

    def __init__(self, trainer: DrafterTrainer) -> None:
        super().__init__()
        self.drafter = trainer.drafter
        object.__setattr__(self, "trainer", trainer)  # not a submodule: DDP must not see the target

    def forward(self, step: int, positions: list[int], picks: list[int]) -> tuple[torch.Tensor, int]:
        """Mean loss over this process's sequences (DDP's gradient average then gives the global batch mean)."""
        trainer, total, labelled = self.trainer, 0.0, 0
        for position in positions:
            rng = trainer.pick_rng(step, position)
            with torch.autocast(trainer.device.type, dtype=torch.bfloat16, enabled=trainer.autocast):
                loss, count = trainer.sequence_loss(trainer.sequences[picks[position]], rng)
            total = total + loss / len(positions)
            labelled += count
        return total, labelled


__all__ = ["DrafterTrainer", "NonFiniteError", "StepLoss", "load_with_head"]
