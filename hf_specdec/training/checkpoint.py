"""Training checkpoints that survive a crash: safetensors only, written aside, flushed to disk and swapped in
atomically; never holding a non-finite value; recording the run's arguments so that a resume with arguments that
would change the result is refused (`argument_changes`). A checkpoint file that does not parse, is cut short or
missing, or holds a value of the wrong type is refused with `DamagedCheckpoint` naming the file, before any of it
is loaded into the model."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import MISSING, asdict, fields
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

# Arguments a resumed run may change, and why each keeps the checkpoint's run what it was. Every other argument
# (data, drafter shape, learning rate and schedule, seed, batch, precision, device, ...) must be as the checkpoint
# records it, or the resumed run would silently train something else than the run it continues.
MAY_CHANGE_ON_RESUME: dict[str, str] = {
    "num_steps": "may grow (not shrink below the recorded count): the run goes on to the new count, with the "
    "learning-rate schedule stretched to it from the step reached",
    "save_every": "when checkpoints are written, not what they hold",
    "resume": "whether to resume at all",
    "nonfinite": "what happens to a step whose loss or gradient is not finite; every step taken so far was finite",
    "output_dir": "where the run is kept (a moved run folder)",
    "export_only": "saving the checkpoint's drafter without training on",
    "push_to_hub": "publishing after training",
    "hub_target_id": "publishing after training (the card's base_model)",
    "hub_target_revision": "publishing after training (the card's base_model revision)",
    "license": "publishing after training (the card's license)",
    "benchmark": "publishing after training (the card's measured section)",
}


class NonFiniteError(RuntimeError):
    """A training step or a checkpoint holds a non-finite value (nan or inf); nothing of it was kept."""


class DamagedCheckpoint(ValueError):
    """A checkpoint file does not parse, is cut short or missing, or holds values of the wrong type; the message
    names the file. Nothing of the checkpoint was loaded into the model or the optimizer."""


# the trainer state's fields whose type is checked when present: (JSON types allowed, what the field is)
STATE_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "losses": ((list,), "a list of [step, loss]"),
    "skipped_steps": ((list,), "a list of [step, sequences]"),
    "elapsed_s": ((int, float), "a number of seconds"),
    "arguments": ((dict,), "a mapping of the run's arguments"),
    "data": ((dict,), "a mapping with the training data's fingerprint"),
}


class TrainableOnly:
    """A model seen through its trainable parameters only, for `save_checkpoint` / `load_checkpoint`: checkpoints
    of LoRA adapters on a large drafter hold megabytes, not the frozen gigabytes."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def trainable(self) -> dict[str, torch.Tensor]:
        return {n: p for n, p in self.model.named_parameters() if p.requires_grad}

    def save_pretrained(self, folder: Path) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        weights = {n: p.detach().cpu().contiguous() for n, p in self.trainable().items()}
        save_file(weights, str(Path(folder) / "model.safetensors"))

    def load_state_dict(self, weights: dict[str, torch.Tensor], strict: bool = False) -> tuple[list, list]:
        own = self.trainable()
        missing, unexpected = sorted(set(own) - set(weights)), sorted(set(weights) - set(own))
        with torch.no_grad():
            for name in set(own) & set(weights):
                own[name].copy_(weights[name])
        return missing, unexpected


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Split an optimizer state dict into flat tensors and JSON-able groups."""
    state = optimizer.state_dict()
    tensors = {}
    for idx, entry in state["state"].items():
        for key, value in entry.items():
            value = value if torch.is_tensor(value) else torch.tensor(value)
            tensors[f"state.{idx}.{key}"] = value.detach().cpu().contiguous()
    return tensors, {"param_groups": state["param_groups"]}


def load_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], groups: dict) -> None:
    state: dict[int, dict] = {}
    for name, value in tensors.items():
        _, idx, key = name.split(".", 2)
        state.setdefault(int(idx), {})[key] = value
    optimizer.load_state_dict({"state": state, "param_groups": groups["param_groups"]})


def run_arguments(config) -> dict:
    """What a checkpoint records of the run's arguments: the config class and every field of it (JSON values)."""
    return {"config_class": type(config).__name__, **json.loads(json.dumps(asdict(config)))}


RENAMED_CONFIG_CLASSES = {  # a name checkpoints recorded -> the class's name now
    "CorrectorTrainingConfig": "DCOCOHeadTrainingConfig",
    "MixtureTrainingConfig": "DBLASTHeadTrainingConfig",
}


def argument_changes(recorded: dict, config) -> list[str]:
    """The arguments of `config` that differ from those `recorded` with a checkpoint and would change the result
    (`MAY_CHANGE_ON_RESUME` lists the ones that may change), as 'name: recorded -> now' lines. A config class
    recorded under the name it had before (`RENAMED_CONFIG_CLASSES`) is the same class."""
    recorded = {**recorded}
    if isinstance(recorded.get("config_class"), str):
        recorded["config_class"] = RENAMED_CONFIG_CLASSES.get(recorded["config_class"], recorded["config_class"])
    now = run_arguments(config)
    defaults = {f.name: f.default for f in fields(config) if f.default is not MISSING}
    changes = []
    for name in sorted(set(recorded) | set(now)):
        old, new = recorded.get(name, "<absent>"), now.get(name, "<absent>")
        if old == new or (name not in recorded and name in defaults and new == defaults[name]):
            continue  # equal, or a setting newer than the checkpoint, left at its default
        grows = name == "num_steps" and isinstance(old, int) and isinstance(new, int) and new >= old
        if name in MAY_CHANGE_ON_RESUME and (name != "num_steps" or grows):
            continue
        changes.append(f"{name}: {old!r} in the checkpoint, {new!r} now")
    return changes


def _weights(model) -> dict[str, torch.Tensor]:
    """The tensors `model.save_pretrained` writes: a `TrainableOnly`'s trainable ones, else the state dict."""
    return model.trainable() if isinstance(model, TrainableOnly) else model.state_dict()


def non_finite(tensors: dict[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors that hold a nan or an inf."""
    return sorted(n for n, t in tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all()))


def _flush(path: Path) -> None:
    """fsync a file, or a folder (its entries: files created or renamed in it survive a power cut)."""
    if path.is_dir() and os.name == "nt":  # Windows cannot open a folder to flush it; NTFS journals renames
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(folder: Path, model, optimizer, trainer_state: dict) -> None:
    """Write model, optimizer and trainer state to `folder`, replacing an older checkpoint only once complete.

    Everything is written to `folder`.tmp and flushed to disk (each file, then the folder) before the swap, and the
    parent folder is flushed after it, so a power cut leaves either the old checkpoint or the new one, whole.
    `NonFiniteError` if a weight or an optimizer tensor holds a nan or an inf: the older checkpoint stays.
    """
    tensors, groups = optimizer_tensors(optimizer)
    broken = non_finite(_weights(model)) + non_finite(tensors)
    if broken:
        raise NonFiniteError(
            f"refusing to write checkpoint {folder} at step {trainer_state.get('step')}: non-finite values in "
            f"{broken[:5]}{' ...' if len(broken) > 5 else ''}; the checkpoint already there (if any) is kept."
        )
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    (tmp / "optimizer_groups.json").write_text(json.dumps(groups))
    (tmp / "trainer_state.json").write_text(json.dumps(trainer_state))  # last: its presence marks a whole checkpoint
    for path in sorted(tmp.rglob("*")):
        if path.is_file():
            _flush(path)
    _flush(tmp)
    old = folder.with_name(folder.name + ".old")
    if folder.exists():
        shutil.rmtree(old, ignore_errors=True)
        folder.rename(old)
    tmp.rename(folder)
    _flush(folder.parent)
    shutil.rmtree(old, ignore_errors=True)


def find_checkpoint(folder: Path) -> Path | None:
    """The complete checkpoint in `folder`, or the previous one if a crash hit between the two renames."""
    for candidate in (folder, folder.with_name(folder.name + ".old")):
        if (candidate / "trainer_state.json").exists():
            return candidate
    return None


def read_trainer_state(folder: Path) -> dict:
    """The trainer state saved with the checkpoint in `folder` (with the run's `arguments` and the data's
    fingerprint when recorded). `DamagedCheckpoint` naming trainer_state.json if it does not parse or a field has
    the wrong type."""
    path = folder / "trainer_state.json"
    state = _json_file(path)
    problems = state_problems(state)
    if problems:
        raise DamagedCheckpoint(f"{path} is damaged: {'; '.join(problems)}")
    return state


def state_problems(state: object) -> list[str]:
    """What is wrong with a trainer state read back (not a mapping, a step that is not a count, a field of
    `STATE_FIELDS` of the wrong type); [] when it can be resumed from."""
    if not isinstance(state, dict):
        return [f"it holds a JSON {_kind(state)}, not the trainer state's mapping"]
    step = state.get("step")
    problems = [] if _is_count(step) else [f"'step' is {step!r}, not a count of steps"]
    for name, (types, what) in STATE_FIELDS.items():
        value = state.get(name)
        if name in state and (isinstance(value, bool) or not isinstance(value, types)):
            problems.append(f"'{name}' is a JSON {_kind(value)}, not {what}")
    data = state.get("data")
    if isinstance(data, dict) and not (_is_count(data.get("sequences")) and isinstance(data.get("sha256"), str)):
        problems.append(f"'data' is {data!r}, not a count of sequences and a sha256")
    return problems


def load_checkpoint(folder: Path, model, optimizer) -> dict:
    """Restore model and optimizer from `folder`; return the trainer state. Every file is read and checked before
    anything is loaded: `DamagedCheckpoint` names the file that does not parse, is cut short or is missing;
    ValueError for weights that do not fit the model."""
    state = read_trainer_state(folder)
    weights = _tensors(folder / "model.safetensors")
    groups = _json_file(folder / "optimizer_groups.json")
    if not isinstance(groups, dict) or not isinstance(groups.get("param_groups"), list):
        raise DamagedCheckpoint(f"{folder / 'optimizer_groups.json'} is damaged: it holds no list of param_groups")
    tensors = _tensors(folder / "optimizer.safetensors")
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or [m for m in missing if "rotary" not in m]:
        raise ValueError(f"checkpoint {folder} does not fit this drafter: missing {missing}, unexpected {unexpected}")
    try:
        load_optimizer(optimizer, tensors, groups)
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise DamagedCheckpoint(
            f"{folder / 'optimizer.safetensors'} and optimizer_groups.json do not hold this run's optimizer state "
            f"({type(err).__name__}: {err})"
        ) from None
    return state


def _json_file(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DamagedCheckpoint(f"{path} is missing") from None
    except (OSError, ValueError) as err:  # not UTF-8, not JSON, cut short
        raise DamagedCheckpoint(f"{path} does not parse as JSON ({type(err).__name__}: {err})") from None


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except FileNotFoundError:
        raise DamagedCheckpoint(f"{path} is missing") from None
    except (SafetensorError, OSError, ValueError) as err:  # cut short, or not safetensors at all
        raise DamagedCheckpoint(f"{path} is not a whole safetensors file ({err})") from None


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _kind(value: object) -> str:
    """The JSON name of a parsed value's type."""
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


__all__ = [
    "MAY_CHANGE_ON_RESUME",
    "DamagedCheckpoint",
    "NonFiniteError",
    "TrainableOnly",
    "argument_changes",
    "find_checkpoint",
    "load_checkpoint",
    "non_finite",
    "read_trainer_state",
    "run_arguments",
    "save_checkpoint",
    "state_problems",
]
