"""Training checkpoints that survive a crash: safetensors only, written aside and swapped in atomically."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


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


def save_checkpoint(folder: Path, model, optimizer, trainer_state: dict) -> None:
    """Write model, optimizer and trainer state to `folder`, replacing an older checkpoint only once complete."""
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tensors, groups = optimizer_tensors(optimizer)
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    (tmp / "optimizer_groups.json").write_text(json.dumps(groups))
    (tmp / "trainer_state.json").write_text(json.dumps(trainer_state))
    old = folder.with_name(folder.name + ".old")
    if folder.exists():
        shutil.rmtree(old, ignore_errors=True)
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def find_checkpoint(folder: Path) -> Path | None:
    """The complete checkpoint in `folder`, or the previous one if a crash hit between the two renames."""
    for candidate in (folder, folder.with_name(folder.name + ".old")):
        if (candidate / "trainer_state.json").exists():
            return candidate
    return None


def load_checkpoint(folder: Path, model, optimizer) -> dict:
    """Restore model and optimizer from `folder`; return the trainer state."""
    weights = load_file(str(folder / "model.safetensors"))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or [m for m in missing if "rotary" not in m]:
        raise ValueError(f"checkpoint {folder} does not fit this drafter: missing {missing}, unexpected {unexpected}")
    groups = json.loads((folder / "optimizer_groups.json").read_text())
    load_optimizer(optimizer, load_file(str(folder / "optimizer.safetensors")), groups)
    return json.loads((folder / "trainer_state.json").read_text())


__all__ = ["find_checkpoint", "load_checkpoint", "save_checkpoint"]
