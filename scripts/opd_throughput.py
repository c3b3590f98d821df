"""Supervised tokens per second: SpecOPD vs sequential OPD on the same target, drafter and data, in one run.

    python scripts/opd_throughput.py --target ~/.cache/hf_specdec/models/qwen2.5-coder-1.5b \
        --drafter drafters/qwen2.5-coder-1.5b --output_dir results/opd-throughput \
        --data_dir runs/qwen1.5b-b8/data --continue_prompts False --label_source target_argmax --num_prompts 160 \
        --max_length 512 --steps 8 --batch_size 1 --tree_anchors 16 --branches 8

Writes output_dir/throughput.json and prints a table.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

from hf_specdec.training.config import DistillationConfig
from hf_specdec.training.pipeline import build_drafter, load_target, prepare_sequences
from hf_specdec.training.throughput import measure_supervision


@dataclass
class ThroughputArgs:
    steps: int = field(default=8, metadata={"help": "timed optimizer steps per objective (after one warm-up step)"})


def main() -> None:
    config, args = HfArgumentParser([DistillationConfig, ThroughputArgs]).parse_args_into_dataclasses()
    target, tokenizer = load_target(config)
    drafter = build_drafter(config, target)
    sequences = prepare_sequences(config, target, tokenizer, drafter.config.target_layer_ids)
    rows = measure_supervision(config, target, drafter, sequences, ["sequential_opd", "specopd"], args.steps)
    base = rows[0].tokens_per_second
    print("| objective | supervised tok/s | ratio | per target-second | supervised / target pass | target tokens | s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r.objective} | {r.tokens_per_second:.1f} | {r.tokens_per_second / base:.2f}x | "
            f"{r.tokens_per_target_second:.1f} | {r.supervised_per_pass:.1f} | {r.target_tokens} | {r.seconds:.1f} |"
        )
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "config": dataclasses.asdict(config),
        "steps": args.steps,
        "rows": [
            dataclasses.asdict(r)
            | {"tokens_per_second": r.tokens_per_second, "tokens_per_target_second": r.tokens_per_target_second}
            for r in rows
        ],
        "ratio": rows[1].tokens_per_second / base,
        "device": str(target.device),
    }
    (out / "throughput.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
