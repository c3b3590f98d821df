"""Train a DCOCO head on a trained drafter of any base (a block drafter, a PARD drafter); the drafter and the target
stay frozen.

    # a trained block drafter, reusing the data its own training run cached (same data settings):
    python scripts/train_dcoco_head.py --target ~/.cache/hf_specdec/models/qwen2.5-coder-1.5b \\
        --drafter runs/qwen1.5b-b8/drafter --data_dir runs/qwen1.5b-b8/data --output_dir runs/dcoco \\
        --continue_prompts False --label_source target_argmax --num_prompts 160 --max_length 512 --num_steps 300

Killed runs resume from output_dir/checkpoint. The drafter with its head is written to output_dir/drafter, the loss
curve, candidate recall and timings to output_dir/training_log.json.
"""

from __future__ import annotations

import json

from command_line import library_module

config_module = library_module("hf_specdec.training.config")  # standard library only: --help stays instant


def build_parser():
    """The command line: DCOCOHeadTrainingConfig's fields (an HfArgumentParser, defaults shown)."""
    return config_module.argument_parser(config_module.DCOCOHeadTrainingConfig, description=__doc__)


def main(argv: list[str] | None = None) -> None:
    (config,) = build_parser().parse_args_into_dataclasses(argv)
    from hf_specdec.training.run import run  # torch and transformers: after the arguments

    out = run(config)
    log = json.loads((out.parent / "training_log.json").read_text())
    print(f"drafter with a DCOCO head written to {out}; candidate recall {log['candidate_recall']:.3f}")


if __name__ == "__main__":
    main()
