"""Supervised tokens per second: SpecOPD vs sequential OPD on the same target, drafter and data, in one run.

    python scripts/opd_throughput.py --target ~/.cache/hf_specdec/models/qwen2.5-coder-1.5b \\
        --drafter runs/qwen1.5b-b8/drafter --output_dir runs/opd-throughput \\
        --data_dir runs/qwen1.5b-b8/data --continue_prompts False --label_source target_argmax --num_prompts 160 \\
        --max_length 512 --steps 8 --batch_size 1 --tree_anchors 16 --branches 8

Writes output_dir/throughput.json and prints a table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from command_line import HelpFormatter, library_module

config_module = library_module("hf_specdec.training.config")  # standard library only: --help stays instant


@dataclass
class ThroughputArgs:
    steps: int = field(default=8, metadata={"help": "timed optimizer steps per objective (after one warm-up step)"})


def build_parser():
    """The command line: DistillationConfig's fields and --steps (an HfArgumentParser, defaults shown)."""
    from transformers import HfArgumentParser  # argument parsing only: it does not import torch

    return HfArgumentParser(
        [config_module.DistillationConfig, ThroughputArgs], description=__doc__, formatter_class=HelpFormatter
    )


def main(argv: list[str] | None = None) -> None:
    config, args = build_parser().parse_args_into_dataclasses(argv)
    from hf_specdec.training.throughput import compare_on_policy_objectives  # torch: after the arguments

    print(compare_on_policy_objectives(config, args.steps))


if __name__ == "__main__":
    main()
