"""What a run says about itself: where it starts (fresh or resumed, and from which step), the summary it ends with,
and `show_run_messages`, which prints these (logged to the "hf_specdec.training" logger) on a console."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from .config import DrafterTrainingConfig
from .trainer import DrafterTrainer

logger = logging.getLogger("hf_specdec.training")


def show_run_messages(stream=None) -> None:
    """Print the training messages (start, resume, adjustments, summary, publishing) as plain lines on `stream`
    (default stdout); what a script calls, a library leaves logging to its caller."""
    if any(getattr(h, "hf_specdec_console", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.hf_specdec_console = True
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # printed once, here


def start_message(config: DrafterTrainingConfig, trainer: DrafterTrainer, resumed: bool, checkpoint_seen: bool) -> str:
    """One line on how the run starts: afresh or resumed (from which step), and where it keeps its checkpoint."""
    state, total = trainer.state, config.num_steps
    where = trainer.checkpoint_dir
    if resumed:
        last = f", loss {state['losses'][-1][1]:.3f}" if state["losses"] else ""
        left = "nothing left to train" if state["step"] >= total else f"{total - state['step']} steps to go"
        return f"resumed from {where} at step {state['step']} of {total}{last}: {left}"
    if checkpoint_seen:
        return f"starting afresh (--no_resume): {where} is overwritten at the first checkpoint; {total} steps"
    start = f"starting from --drafter {config.drafter}" if config.drafter else "from scratch"
    return f"training {total} steps {start}; checkpoints every {config.save_every} steps in {where}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def run_summary(
    config: DrafterTrainingConfig,
    trainer: DrafterTrainer,
    drafter_dir: Path,
    resumed_at: int | None,
    wall_seconds: float,
) -> str:
    """The lines a finished run ends with: steps, supervised tokens, loss first -> last, time, where the drafter (and
    adapter) is, and the line of Python that uses it."""
    state = trainer.state
    losses = state["losses"]
    loss = f"loss {losses[0][1]:.3f} -> {losses[-1][1]:.3f}" if losses else "no loss logged"
    resumed = f" (resumed at step {resumed_at})" if resumed_at is not None else ""
    tokens = trainer.supervised_key.replace("_", " ")
    lines = [
        f"done: {state['step']} steps{resumed}, {state['supervised_tokens']:,} {tokens} seen, {loss}, "
        f"{_duration(state['elapsed_s'])} of training in total, {_duration(wall_seconds)} in this process",
        f"drafter: {drafter_dir}",
    ]
    adapter = Path(config.output_dir) / "adapter"
    if config.lora_rank and adapter.is_dir():
        lines.append(f"adapter: {adapter} (the LoRA adapter alone; the drafter above has it merged)")
    lines.append(f"log: {Path(config.output_dir) / 'training_log.json'}")
    where = str(drafter_dir.resolve())
    lines.append(
        "use it (after `import hf_specdec`): target.generate(**inputs, "
        f"assistant_model=hf_specdec.load_drafter({where!r}, dtype=target.dtype))"
    )
    return "\n".join(lines)


__all__ = ["run_summary", "show_run_messages", "start_message"]
