"""Where a drafter's base language model lives: a folder, an hf_specdec offline model, or a Hub id.

Offline models (`scripts/offline_models.py NAME`) are built into `$HF_SPECDEC_MODELS`, else
`~/.cache/hf_specdec/models`; a drafter saved as an adapter names its base by that name, so it loads on any
machine that has built it (or has Hub access, when the name is a Hub id).
"""

from __future__ import annotations

import os
from pathlib import Path


def offline_models_dir() -> Path:
    """`$HF_SPECDEC_MODELS` if set, else `~/.cache/hf_specdec/models`."""
    env = os.environ.get("HF_SPECDEC_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "hf_specdec" / "models"


def resolve_base_model(name: str | os.PathLike, relative_to: str | os.PathLike | None = None) -> str:
    """A folder for `name` when one exists, else `name` unchanged (a Hub id for `from_pretrained`). Looked for: as
    given; relative to `relative_to` (the folder that records it) or a folder above it (where training ran); as an
    offline model; and, for an offline model's folder on another machine (.../hf_specdec/models/NAME), as the
    offline model NAME here."""
    name = str(name)
    given = Path(name).expanduser()
    candidates = [given]
    if relative_to is not None and not given.is_absolute():
        here = Path(relative_to).resolve()
        candidates += [here / name] + [parent / name for parent in here.parents]
    candidates.append(offline_models_dir() / name)
    if given.is_absolute() and given.parent.parts[-2:] == ("hf_specdec", "models"):
        candidates.append(offline_models_dir() / given.name)
    for folder in candidates:
        if (folder / "config.json").is_file():
            return str(folder)
    return name


def missing_base_hint(name: str) -> str:
    return (
        f"the base model {name!r} is neither a folder nor a built offline model in {offline_models_dir()}. Build it "
        f"with `python scripts/offline_models.py {name}` (offline), or point base_model at a folder or a Hub id."
    )


__all__ = ["missing_base_hint", "offline_models_dir", "resolve_base_model"]
