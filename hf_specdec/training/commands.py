"""Command lines of a run, rebuilt from its config: the recipe a model card shows and the command that resumes."""

from __future__ import annotations

import shlex
from dataclasses import MISSING, fields

from .config import DistillationConfig, DrafterTrainingConfig

# Settings that publish or choose how to start, not what is trained: not part of a recipe.
NOT_IN_RECIPE = ("push_to_hub", "resume", "license", "benchmark")


def command_line(config: DrafterTrainingConfig, skip: tuple[str, ...] = ()) -> str:
    """`python <script>` and the settings of `config` that differ from the defaults of the class that script parses
    (no secrets live in the config); a changed boolean as its flag (`--no_resume`, `--joint`)."""
    parsed = DistillationConfig if isinstance(config, DistillationConfig) else type(config)
    defaults = {f.name: f.default_factory() if f.default_factory is not MISSING else f.default for f in fields(parsed)}
    parts = [f"python {config.script}"]
    for f in fields(config):
        value = getattr(config, f.name)
        if f.name in skip or value == defaults.get(f.name, MISSING):
            continue
        if isinstance(value, bool):
            parts.append(f"--{f.name}" if value else f"--no_{f.name}")
        elif isinstance(value, list):
            parts.append(f"--{f.name} " + " ".join(shlex.quote(str(v)) for v in value))
        else:
            parts.append(f"--{f.name} {shlex.quote(str(value))}")
    return " ".join(parts)


def recipe_command(config: DrafterTrainingConfig) -> str:
    """The training command line of this run, without the settings that only publish or resume it."""
    return command_line(config, skip=NOT_IN_RECIPE)


def resume_command(config: DrafterTrainingConfig, processes: int = 1) -> str:
    """The command that continues this run from its checkpoint: its settings without `--no_resume`, under
    `accelerate launch` when it ran in several processes."""
    command = command_line(config, skip=("resume", "export_only"))
    if processes > 1:
        command = command.replace("python ", f"accelerate launch --num_processes {processes} ", 1)
    return command


def afresh_command(config: DrafterTrainingConfig, processes: int = 1) -> str:
    """The command that starts this run again from step 0 (`--no_resume`: the checkpoint in its output_dir is
    overwritten, the cached data reused)."""
    return resume_command(config, processes) + " --no_resume"


__all__ = ["NOT_IN_RECIPE", "afresh_command", "command_line", "recipe_command", "resume_command"]
