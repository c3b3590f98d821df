"""Supervised tokens per second of on-policy distillation: SpecOPD against sequential OPD, same data and drafter."""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass

from tqdm.auto import tqdm

from .config import DistillationConfig
from .pipeline import trainer_class

COUNTERS = ("supervised_tokens", "target_tokens", "target_passes", "branch_tokens", "target_seconds")


@dataclass
class SupervisionThroughput:
    """What `steps` optimizer steps of one objective cost and supervised (warm-up step excluded)."""

    objective: str
    steps: int
    seconds: float
    supervised_tokens: int  # distinct drafted tokens that got a teacher distribution
    target_tokens: int  # tokens fed to the target
    target_passes: int
    target_seconds: float  # of `seconds`, spent in target passes (incl. the teacher softmax)

    @property
    def tokens_per_second(self) -> float:
        return self.supervised_tokens / self.seconds

    @property
    def tokens_per_target_second(self) -> float:
        return self.supervised_tokens / self.target_seconds

    @property
    def supervised_per_pass(self) -> float:
        return self.supervised_tokens / max(1, self.target_passes)


def measure_supervision(
    config: DistillationConfig, target, drafter, sequences, objectives: list[str], steps: int
) -> list[SupervisionThroughput]:
    """Train a fresh copy of `drafter` for 1 + `steps` steps per objective (same sequences and seeds); time the last
    `steps` (whole optimizer steps: drafting, target passes, loss, backward, update)."""
    rows = []
    for objective in objectives:
        run_config = dataclasses.replace(config, objective=objective)
        trainer = trainer_class(run_config)(run_config, target, copy.deepcopy(drafter), sequences)
        trainer.train_step()  # warm-up: allocator, kernels
        trainer.state["step"] += 1
        before = {k: trainer.state[k] for k in COUNTERS}
        start = time.perf_counter()
        for _ in tqdm(range(steps), desc=objective, unit="step"):
            trainer.train_step()
            trainer.state["step"] += 1
        seconds = time.perf_counter() - start
        done = {k: trainer.state[k] - before[k] for k in COUNTERS}
        rows.append(
            SupervisionThroughput(
                objective,
                steps,
                seconds,
                done["supervised_tokens"],
                done["target_tokens"],
                done["target_passes"],
                done["target_seconds"],
            )
        )
    return rows


__all__ = ["SupervisionThroughput", "measure_supervision"]
