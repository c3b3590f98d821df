"""`drafter.push_to_hub(repo_id, ...)` takes the one publishing path: `publish_drafter`'s.

transformers gives every model a `push_to_hub` that saves it and uploads the whole folder, with no allow-list, no
scrubbing of local paths and no card of hf_specdec's. A drafter's `push_to_hub` is `PublishMixin.push_to_hub`
instead: it saves the drafter to a temporary folder, adds the side files of the folder it was loaded from (the run
record TRAINING.md and loss.png, tokenizer files), and calls `publish_drafter` on that folder with the run record of
the folder it was loaded from. So both calls check the drafter, send the same allow-listed files with local paths
rewritten, refuse the same files (symlinks, the token, local paths) and render the same card.

The drafter classes live in `hf_specdec.models`, a layer below this one that does not import it (pyproject's import
contracts), so this package puts the method on them: `install_push_to_hub()` runs when `hf_specdec.hub` is imported,
which `import hf_specdec` does, on every base registered by then (`BlockDrafter`, `PardDrafter`) and so on the
classes built on them. A base registered later by other code gets it by listing `PublishMixin` first among its
bases.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ..models.registry import registered_kinds
from .publish import PUBLISHED, WEIGHTS, files_to_publish, publish_drafter
from .record import run_record

# Files of the folder a drafter was loaded from that `save_pretrained` does not write, copied beside what it saved:
# the run record and tokenizer files (the weights and configs are what was saved; an adapter's are not the drafter's).
SIDE_FILES = tuple(
    name
    for name in PUBLISHED
    if not WEIGHTS.fullmatch(name)
    and not name.endswith(".safetensors")
    and name not in ("config.json", "adapter_config.json", "generation_config.json")
)


def loaded_from(drafter) -> Path | None:
    """The local folder `drafter` was loaded from (`name_or_path`), if it is one holding a config; else None."""
    name = str(getattr(drafter, "name_or_path", "") or "")
    path = Path(name)
    return path if name and (path / "config.json").is_file() else None


def push_drafter(
    drafter,
    repo_id: str,
    *,
    extra_files: Iterable[str] = (),
    private: bool | None = None,
    **publish_kwargs,
) -> str | list[str]:
    """Publish the in-memory `drafter` as `publish_drafter` publishes a folder (module docstring); the commit sha,
    or with `dry_run=True` the repo paths that would go up. `extra_files` name files of the folder the drafter was
    loaded from; the other keyword arguments are `publish_drafter`'s."""
    source = loaded_from(drafter)
    extras = [extra_files] if isinstance(extra_files, str) else list(extra_files)
    if extras and source is None:
        raise ValueError(
            f"extra_files {extras} name files of the folder a drafter was loaded from, but this drafter was not "
            "loaded from a local folder; save it, put the files beside it and call publish_drafter(folder, ...)."
        )
    with tempfile.TemporaryDirectory(prefix="hf_specdec-push-") as tmp:
        folder = Path(tmp) / "drafter"
        drafter.save_pretrained(folder)
        if source is not None:
            for path in files_to_publish(source, extras):  # refuses symlinks and extras that are not files
                if (path.name in SIDE_FILES or path.name in extras) and not (folder / path.name).exists():
                    shutil.copyfile(path, folder / path.name)
        return publish_drafter(
            folder,
            repo_id,
            extra_files=extras,
            private=bool(private),
            record=run_record(source) if source is not None else None,
            **publish_kwargs,
        )


class PublishMixin:
    """Gives a drafter class hf_specdec's `push_to_hub` (module docstring)."""

    def push_to_hub(
        self,
        repo_id: str,
        *,
        target_id: str | None = None,
        target_revision: str | None = None,
        benchmark: str | os.PathLike | dict | None = None,
        training_log: str | os.PathLike | dict | None = None,
        recipe: str | None = None,
        license: str | None = None,
        private: bool | None = None,
        token: str | None = None,
        commit_message: str | None = None,
        extra_files: Iterable[str] = (),
        dry_run: bool = False,
    ) -> str | list[str]:
        """Upload this drafter to the Hub repo `repo_id` with its model card, as `hf_specdec.publish_drafter` uploads
        the folder it is saved in: the same checks, files and card. Returns the commit sha (with `dry_run`, the
        sorted repo paths that would go up; nothing is sent). The arguments are `publish_drafter`'s; `extra_files`
        name files of the folder the drafter was loaded from. transformers' `revision`, `create_pr`,
        `max_shard_size` and `tags` are not taken: a drafter goes up as one commit to the main branch."""
        return push_drafter(
            self,
            repo_id,
            target_id=target_id,
            target_revision=target_revision,
            benchmark=benchmark,
            training_log=training_log,
            recipe=recipe,
            license=license,
            private=private,
            token=token,
            commit_message=commit_message,
            extra_files=extra_files,
            dry_run=dry_run,
        )


def install_push_to_hub(classes: Iterable[type] | None = None) -> None:
    """Give `classes` (default: every registered base's model class) `PublishMixin.push_to_hub`, unless a class
    defines a `push_to_hub` of its own."""
    for cls in classes if classes is not None else [kind.model_class for kind in registered_kinds()]:
        if "push_to_hub" not in cls.__dict__ and not issubclass(cls, PublishMixin):
            cls.push_to_hub = PublishMixin.push_to_hub


__all__ = ["SIDE_FILES", "PublishMixin", "install_push_to_hub", "loaded_from", "push_drafter"]
