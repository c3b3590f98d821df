"""What a checkpoint records of the data it was trained on: a fingerprint of the training sequences, so that a
resume on other data (the data file edited, its cache rebuilt) is refused instead of training on silently.

The fingerprint is the number of sequences and a sha256 over each sequence's token ids and first supervised
position, in order; the target features are left out (they follow from the ids and the target, and a sequence
whose features hold a nan is still the same sequence)."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

import torch

from .data import TrainingSequence


def data_fingerprint(sequences: Sequence[TrainingSequence]) -> dict:
    """{"sequences": how many, "sha256": hex digest over (length, loss_start, int64 token ids) of each, in order}."""
    digest = hashlib.sha256()
    for seq in sequences:
        ids = seq.ids.detach().to("cpu", torch.int64).contiguous()
        digest.update(struct.pack("<qq", ids.numel(), int(seq.loss_start)))
        digest.update(ids.numpy().tobytes())
    return {"sequences": len(sequences), "sha256": digest.hexdigest()}


def data_changes(recorded: dict, now: dict) -> list[str]:
    """How the data `recorded` with a checkpoint differs from the data of this run, as 'what: checkpoint, now'
    lines ([] when it is the same data)."""
    changes = []
    if recorded.get("sequences") != now["sequences"]:
        changes.append(f"training sequences: {recorded.get('sequences')!r} in the checkpoint, {now['sequences']} now")
    if recorded.get("sha256") != now["sha256"]:
        changes.append(
            "training data fingerprint (sha256 of the sequences' token ids and loss starts): "
            f"{_short(recorded.get('sha256'))} in the checkpoint, {_short(now['sha256'])} now"
        )
    return changes


def _short(digest: object) -> str:
    return f"{digest[:12]}..." if isinstance(digest, str) and len(digest) > 12 else repr(digest)


__all__ = ["data_changes", "data_fingerprint"]
