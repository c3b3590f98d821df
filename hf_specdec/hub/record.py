"""What a training run left next to a drafter folder, for its card and its upload.

`scripts/train_drafter.py` writes output_dir/{drafter, adapter, checkpoint, training_log.json} (and may write
TRAINING.md and loss.png); `scripts/ship_drafter.py` writes drafters/NAME/{..., TRAINING.md, loss.png}. A folder's
record is what the folder itself holds, else what its run folder (the parent, when that holds a
training_log.json or a checkpoint) holds: so `publish_drafter("runs/x/drafter", ...)` finds the run's log, settings,
TRAINING.md and loss plot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

TRAINING_MD, LOSS_PNG, TRAINING_LOG = "TRAINING.md", "loss.png", "training_log.json"
TRAINER_STATE = Path("checkpoint") / "trainer_state.json"
# Settings that say nothing about how the drafter was made (where things were kept, whether to publish).
UNTOLD = ("config_class", "output_dir", "data_dir", "resume", "push_to_hub", "export_only", "save_every")


@dataclass
class RunRecord:
    """The files and figures of the run that made a drafter; each None when absent."""

    training_md: Path | None = None
    loss_png: Path | None = None
    log: dict | None = None
    settings: dict | None = None

    @property
    def adjustments(self) -> list[str]:
        """Sentences on settings the run clamped or adjusted (`adjustments` in the log or the saved settings)."""
        for source in (self.log, self.settings):
            if source and source.get("adjustments"):
                found = source["adjustments"]
                return [found] if isinstance(found, str) else [str(s) for s in found]
        return []

    def told_settings(self) -> dict:
        """The saved settings a reader of the card needs: set ones, without where things were kept."""
        if not self.settings:
            return {}
        return {k: v for k, v in self.settings.items() if k not in UNTOLD and v not in (None, [], "", False)}


def run_folder(folder: Path) -> Path | None:
    """The training run `folder` was saved in (its parent holds a training log or a checkpoint), else None."""
    parent = folder.resolve().parent
    return parent if (parent / TRAINING_LOG).is_file() or (parent / TRAINER_STATE).is_file() else None


def _first(name: str, folders: list[Path]) -> Path | None:
    return next((f / name for f in folders if (f / name).is_file() and not (f / name).is_symlink()), None)


def run_record(folder: str | Path) -> RunRecord:
    """The record of the drafter saved in `folder`: from the folder, else from its run folder."""
    folder = Path(folder)
    run = run_folder(folder)
    folders = [folder] + ([run] if run else [])
    log_file = _first(TRAINING_LOG, folders)
    state_file = _first(str(TRAINER_STATE), folders)
    settings = json.loads(state_file.read_text(encoding="utf-8")).get("arguments") if state_file else None
    return RunRecord(
        training_md=_first(TRAINING_MD, folders),
        loss_png=_first(LOSS_PNG, folders),
        log=json.loads(log_file.read_text(encoding="utf-8")) if log_file else None,
        settings=settings if isinstance(settings, dict) else None,
    )


def smoothed(values: list[float], width: int = 20) -> list[float]:
    """Trailing mean over the last `width` values at each point, so the plot shows the trend under step noise."""
    out, acc = [], []
    for v in values:
        acc = (acc + [v])[-width:]
        out.append(sum(acc) / len(acc))
    return out


def write_plot(losses: list[list[float]], path: Path) -> bool:
    """Plot (step, loss) pairs and their 20-step mean to `path` (a run's loss.png); False when matplotlib is not
    installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    steps, values = [s for s, _ in losses], [v for _, v in losses]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, values, alpha=0.3, label="loss")
    ax.plot(steps, smoothed(values), label="20-step mean")
    ax.set_xlabel("step")
    ax.set_ylabel("position-decayed CE")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


__all__ = ["RunRecord", "run_folder", "run_record", "smoothed", "write_plot"]
