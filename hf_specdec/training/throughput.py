"""Supervised tokens per second of on-policy distillation: SpecOPD against sequential OPD, same data and drafter."""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from ..models.target_features import drafter_layer_ids
from .config import DistillationConfig
from .counters import COUNTERS
from .run import trainer_class
from .sequences import prepare_sequences
from .target import load_target
from .trainer import DrafterTrainer


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
        run_config = config.for_objective(objective)
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
        measured = {f.name: done[f.name] for f in dataclasses.fields(SupervisionThroughput) if f.name in COUNTERS}
        rows.append(SupervisionThroughput(objective, steps, seconds, **measured))
    return rows


def throughput_table(rows: list[SupervisionThroughput]) -> str:
    """A markdown table of `rows`, ratios against the first."""
    base = rows[0].tokens_per_second
    lines = [
        "| objective | supervised tok/s | ratio | per target-second | supervised / target pass | target tokens | s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.objective} | {r.tokens_per_second:.1f} | {r.tokens_per_second / base:.2f}x | "
            f"{r.tokens_per_target_second:.1f} | {r.supervised_per_pass:.1f} | {r.target_tokens} | {r.seconds:.1f} |"
        )
    return "\n".join(lines)


def compare_on_policy_objectives(config: DistillationConfig, steps: int) -> str:
    """Sequential OPD then SpecOPD on `config`'s target, drafter and (cached) data: write output_dir/throughput.json
    and return the table."""
    target, tokenizer = load_target(config)
    drafter = DrafterTrainer.build_drafter(config, target)
    sequences = prepare_sequences(config, target, tokenizer, drafter_layer_ids(drafter.config, target.config))
    rows = measure_supervision(config, target, drafter, sequences, ["sequential_opd", "specopd"], steps)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "config": dataclasses.asdict(config),
        "steps": steps,
        "rows": [
            dataclasses.asdict(r)
            | {"tokens_per_second": r.tokens_per_second, "tokens_per_target_second": r.tokens_per_target_second}
            for r in rows
        ],
        "ratio": rows[1].tokens_per_second / rows[0].tokens_per_second,
        "device": str(target.device),
    }
    (out / "throughput.json").write_text(json.dumps(result, indent=1))
    return throughput_table(rows)


__all__ = ["SupervisionThroughput", "compare_on_policy_objectives", "measure_supervision", "throughput_table"]
