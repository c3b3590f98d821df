"""Train a DBLAST head on a trained drafter of any base, for expected verified length at a temperature.

    # a trained block drafter, reusing the data its own training run cached (same data settings), T = 1:
    python scripts/train_dblast_head.py --target ~/.cache/hf_specdec/models/qwen2.5-coder-1.5b \\
        --drafter runs/qwen1.5b-b8/drafter --data_dir runs/qwen1.5b-b8/data --output_dir runs/dblast \\
        --continue_prompts False --label_source target_argmax --num_prompts 160 --max_length 512 --num_steps 300

The target's top-m probabilities are cached once under data_dir. Killed runs resume from output_dir/checkpoint.
"""

from __future__ import annotations

from command_line import library_module

config_module = library_module("hf_specdec.training.config")  # standard library only: --help stays instant


def build_parser():
    """The command line: DBLASTHeadTrainingConfig's fields (an HfArgumentParser, defaults shown)."""
    return config_module.argument_parser(config_module.DBLASTHeadTrainingConfig, description=__doc__)


def main(argv: list[str] | None = None) -> None:
    (config,) = build_parser().parse_args_into_dataclasses(argv)
    from hf_specdec.training.run import run  # torch and transformers: after the arguments

    print(f"DBLAST drafter written to {run(config)}")


if __name__ == "__main__":
    main()
