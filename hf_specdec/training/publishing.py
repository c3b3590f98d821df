"""Publishing a trained drafter to the Hub with a model card that records the run's command line."""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path

from .config import DistillationConfig, DrafterTrainingConfig


def publish(config: DrafterTrainingConfig, drafter_dir: Path) -> str:
    """Upload the trained drafter with a generated card (the local copy stays as it is, whatever happens)."""
    from ..hub import publish_drafter

    run = Path(config.output_dir)
    return publish_drafter(
        drafter_dir,
        config.push_to_hub,
        target_id=config.hub_target_id,
        target_revision=config.hub_target_revision,
        training_log=run / "training_log.json",
        recipe=recipe_command(config),
    )


def recipe_command(config: DrafterTrainingConfig) -> str:
    """The training command line of this run: its script and the settings that differ from the defaults of the
    class that script parses (no secrets live in the config)."""
    parsed = DistillationConfig if isinstance(config, DistillationConfig) else type(config)
    defaults = {f.name: f.default_factory() if f.default_factory is not MISSING else f.default for f in fields(parsed)}
    parts = [f"python {config.script}"]
    for f in fields(config):
        value = getattr(config, f.name)
        if f.name in ("push_to_hub", "resume") or value == defaults.get(f.name, MISSING):
            continue
        parts.append(f"--{f.name} " + (" ".join(map(str, value)) if isinstance(value, list) else str(value)))
    return " ".join(parts)


__all__ = ["publish", "recipe_command"]
