"""Train a block drafter for a frozen target with the DFlash objective.

    # CPU, the embedded offline target, built-in prompts (ShareGPT + CPython stdlib), short run:
    python scripts/train_drafter.py --target ~/.cache/hf_specdec/models/qwen2.5-coder-1.5b \
        --output_dir runs/qwen1.5b-b8 --num_prompts 64 --num_steps 300
    # a GPU does data generation and training in one short run:
    python scripts/train_drafter.py --target TARGET --output_dir runs/x --num_prompts 4000 --num_steps 4000 \
        --generation_batch_size 64 --batch_size 16 --device cuda

Killed runs resume from output_dir/checkpoint when started again with the same arguments. The trained drafter is
written to output_dir/drafter, the loss curve and timings to output_dir/training_log.json.
"""

from __future__ import annotations

from transformers import HfArgumentParser

from hf_specdec.training.config import DrafterTrainingConfig
from hf_specdec.training.pipeline import run_training


def main() -> None:
    (config,) = HfArgumentParser(DrafterTrainingConfig).parse_args_into_dataclasses()
    print(f"drafter written to {run_training(config)}")


if __name__ == "__main__":
    main()
