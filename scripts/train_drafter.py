"""Train or fine-tune a drafter for a frozen target: DFlash (teacher-forced), SpecOPD or sequential OPD, full or LoRA.

    # CPU, the embedded offline target, built-in prompts (ShareGPT + CPython stdlib), short run:
    python scripts/train_drafter.py --target ~/.cache/hf_specdec/models/qwen2.5-coder-1.5b \\
        --output_dir runs/qwen1.5b-b8 --num_prompts 64 --num_steps 300
    # a GPU does data generation and training in one short run:
    python scripts/train_drafter.py --target TARGET --output_dir runs/x --num_prompts 4000 --num_steps 4000 \\
        --generation_batch_size 64 --batch_size 16 --device cuda
    # adapt a trained drafter to a (fine-tuned) target on its own policy, LoRA rank 16, then publish it:
    python scripts/train_drafter.py --target TARGET --drafter DRAFTER --objective specopd --lora_rank 16 \\
        --output_dir runs/opd --num_steps 200 --push_to_hub org/name --hub_target_id org/target
    # several processes (DDP; gloo on CPU, NCCL on GPUs); --batch_size is per process:
    accelerate launch --num_processes 2 scripts/train_drafter.py ...

Killed runs resume from output_dir/checkpoint when started again with the same arguments. The trained drafter is
written to output_dir/drafter (with LoRA also the adapter alone to output_dir/adapter), the loss curve and timings
to output_dir/training_log.json. The Hub token comes from HF_TOKEN or `hf auth login`, never from arguments.
"""

from __future__ import annotations

from transformers import HfArgumentParser

from hf_specdec.training.config import DistillationConfig
from hf_specdec.training.run import run


def main() -> None:
    (config,) = HfArgumentParser(DistillationConfig).parse_args_into_dataclasses()  # --objective: its config class
    print(f"drafter written to {run(config)}")


if __name__ == "__main__":
    main()
