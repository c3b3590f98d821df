"""Guarding a drafter checkpoint's load: safetensors only, and a clear refusal of what would load silently wrong
(a damaged file, missing or stray tensors, an unusable draft vocabulary). Every base's `from_pretrained` runs it;
a published layout (`models/formats/`) tells it what it keeps its own way."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from transformers.utils import cached_file

from .draft_vocab import draft_vocab_problem, vocab_bound
from .registry import PublishedFormat


def read_config_dict(path: str | os.PathLike, **hub_kwargs) -> dict | None:
    """The `config.json` of `path` (a folder or a Hub id) as a dict; None when it has none."""
    config_file = cached_file(str(path), "config.json", _raise_exceptions_for_missing_entries=False, **hub_kwargs)
    if config_file is None:
        return None
    with open(config_file, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(f"{config_file} is not valid JSON ({err}); re-save or re-download the drafter.") from err


def load_checked(load: Callable, path, *args, published: PublishedFormat | None = None, **kwargs):
    """Call a `from_pretrained` with safetensors only, and refuse what would load silently wrong.

    A damaged weight file, a tensor the drafter expects but the checkpoint lacks (transformers would fill it with
    random values), a tensor the drafter has no place for, and a draft vocabulary that is missing or outside the
    target's vocabulary all raise a ValueError that names them. A checkpoint in a `published` layout may keep some
    of the drafter's state its own way (a DFlash reduced vocabulary as `d2t` offsets, not our `draft_vocab` buffer):
    the format restores it after loading (`PublishedFormat.after_load`).
    """
    kwargs.setdefault("use_safetensors", True)
    wants_info = kwargs.pop("output_loading_info", False)
    if published is None:
        check_saved_draft_vocab(path, kwargs.get("subfolder", ""))
    with readable(path):
        model, info = load(path, *args, output_loading_info=True, **kwargs)
    hub = {k: kwargs[k] for k in ("revision", "cache_dir", "token", "local_files_only", "subfolder") if k in kwargs}
    restored, layout_tensors = published.after_load(model, path, hub) if published is not None else (False, set())
    check_loaded_tensors(model, info, path, layout_tensors=layout_tensors, draft_vocab_restored=restored)
    check_draft_vocab(model, path)
    return (model, info) if wants_info else model


def is_damaged(err: BaseException) -> bool:
    """Whether `err` (raised while reading safetensors) says a file is corrupt or truncated."""
    text = str(err).lower()
    return isinstance(err, SafetensorError) or "deserializ" in text or "header" in text


@contextmanager
def readable(path, what: str = "the drafter checkpoint") -> Iterator[None]:
    """Turn a damaged safetensors file met inside the block into a ValueError naming `what` at `path`."""
    try:
        yield
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        if not is_damaged(err):
            raise
        text = str(err)
        first_line = text.splitlines()[0] if text else type(err).__name__
        raise ValueError(
            f"{what} at {path!s} could not be read: its safetensors file is corrupt or truncated ({first_line}). "
            "Re-download it or save it again with `save_pretrained`."
        ) from err


def read_safetensors(file: str | os.PathLike, what: str = "the file") -> dict[str, torch.Tensor]:
    """The tensors of one safetensors `file` (`what` it holds); ValueError naming it when it is damaged."""
    with readable(file, what):
        return load_file(str(file))


def check_saved_draft_vocab(path, subfolder: str = "") -> None:
    """Refuse, before loading, a local checkpoint whose saved `draft_vocab` tensor is unusable (float ids, another
    shape, empty, another length than draft_vocab_size, ids outside the vocabulary): transformers would cast or
    reject it with a message that does not name it. A Hub id or a folder without one is left to `check_draft_vocab`."""
    folder = Path(path) / subfolder
    config_file = folder / "config.json"
    if not config_file.is_file():
        return
    file = _file_holding(folder, "draft_vocab")
    if file is None:
        return
    with readable(file, "the drafter checkpoint"), safe_open(str(file), "pt") as f:
        ids = f.get_tensor("draft_vocab")
    config = read_config_dict(folder)
    size = config.get("draft_vocab_size")
    bound = [config.get(k) for k in ("vocab_size", "target_vocab_size") if isinstance(config.get(k), int)]
    _refuse_draft_vocab(draft_vocab_problem(ids, size, min(bound, default=None)), file)


def _file_holding(folder: Path, name: str) -> Path | None:
    """The safetensors file of `folder` (one file, or shards listed in model.safetensors.index.json) that holds
    tensor `name`; None when none does."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shard = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).get(name)
        return folder / shard if shard else None
    file = folder / "model.safetensors"
    if not file.is_file():
        return None
    with readable(file, "the drafter checkpoint"), safe_open(str(file), "pt") as f:
        return file if name in f.keys() else None


def _refuse_draft_vocab(problem: str | None, where) -> None:
    if problem:
        raise ValueError(
            f"the draft vocabulary of the drafter at {where!s} is unusable: {problem}. Save the drafter again with "
            "`set_draft_vocab(token_ids)` and `save_pretrained`, or remove draft_vocab_size from its config."
        )


def check_loaded_tensors(
    model, info: dict, path, layout_tensors: set[str] = frozenset(), draft_vocab_restored: bool = False
):
    """Raise ValueError when the checkpoint lacks tensors the drafter expects (they would be random) or holds
    tensors it has no place for. `info` is `from_pretrained(..., output_loading_info=True)`'s report;
    `layout_tensors`: tensors a published layout keeps that the format itself has read."""
    missing = set(info.get("missing_keys", ()))
    reshaped = {key[0] for key in info.get("mismatched_keys", ())}  # only with ignore_mismatched_sizes=True
    unexpected = set(info.get("unexpected_keys", ()))
    unexpected -= set(layout_tensors)
    if draft_vocab_restored:
        missing.discard("draft_vocab")
    if "draft_vocab" in missing:
        raise ValueError(
            f"the drafter checkpoint at {path!s} sets draft_vocab_size={model.config.draft_vocab_size} but has no "
            "`draft_vocab` tensor (the target ids it scores). Save the drafter again with `save_pretrained`, or "
            "remove draft_vocab_size from its config.json to draft over the whole vocabulary."
        )
    if missing:
        raise ValueError(
            f"the drafter checkpoint at {path!s} lacks {len(missing)} tensor(s) {type(model).__name__} needs: "
            f"{_listed(missing)}. Loading would fill them with random values. Check that the folder holds the whole "
            "drafter (all weight shards) and that its config.json names the right kind, or save it again."
        )
    if reshaped:
        raise ValueError(
            f"the drafter checkpoint at {path!s} has {len(reshaped)} tensor(s) of another shape than "
            f"{type(model).__name__} needs: {_listed(reshaped)}. Loading would fill them with random values. Load it "
            "with the config it was saved with (without ignore_mismatched_sizes)."
        )
    if unexpected:
        raise ValueError(
            f"the drafter checkpoint at {path!s} holds {len(unexpected)} tensor(s) {type(model).__name__} has no "
            f"place for: {_listed(unexpected)}. It was saved by another drafter kind or shape; load it with "
            "`hf_specdec.load_drafter(path)`, which picks the class its config.json names."
        )


def check_draft_vocab(model, path) -> None:
    """Raise ValueError unless a drafter with `draft_vocab_size` holds that many target ids, all in the vocabulary."""
    size = getattr(model.config, "draft_vocab_size", None)
    ids = getattr(model, "draft_vocab", None)
    if size is None or ids is None:
        return
    _refuse_draft_vocab(draft_vocab_problem(ids, size, vocab_bound(model.config)), path)


def _listed(names: set[str], shown: int = 8) -> str:
    names = sorted(names)
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


__all__ = [
    "check_draft_vocab",
    "check_loaded_tensors",
    "check_saved_draft_vocab",
    "is_damaged",
    "load_checked",
    "read_config_dict",
    "read_safetensors",
    "readable",
]
