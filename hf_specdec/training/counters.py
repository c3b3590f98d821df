"""What a training run counts: the ONE list of counters.

Every trainer starts its state with all of them at zero (so checkpoints carry them and a resumed run goes on
counting) and advances those its objective has; training_log.json records all of them, and the throughput
measurement compares them between objectives.
"""

from __future__ import annotations

COUNTERS: dict[str, type] = {
    "supervised_tokens": int,  # labels the loss was computed on (DCOCO and DBLAST heads: drafted slots)
    "trunk_labels": int,  # on-policy: DFlash labels of the trunk anchors (the ce_weight term)
    "target_tokens": int,  # on-policy: tokens fed to the target while training
    "branch_tokens": int,  # on-policy: drafted tokens the target scored
    "target_passes": int,  # on-policy: target forwards while training
    "target_seconds": float,  # on-policy: wall time of those forwards and of the teacher softmax
}


def zero_counters() -> dict[str, int | float]:
    """Every counter at zero: the start of a trainer's state."""
    return {name: kind() for name, kind in COUNTERS.items()}


__all__ = ["COUNTERS", "zero_counters"]
