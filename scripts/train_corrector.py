"""Train a DCOCO corrector on top of a trained block drafter (the drafter and the target stay frozen).

    # the shipped CPU drafter, reusing the data its own training run cached (same data settings):
    python scripts/train_corrector.py --target ~/.cache/hf_specdec/models/qwen2.5-coder-1.5b \\
        --drafter runs/qwen1.5b-b8/drafter --data_dir runs/qwen1.5b-b8/data --output_dir runs/dcoco \\
        --continue_prompts False --label_source target_argmax --num_prompts 160 --max_length 512 --num_steps 300

Killed runs resume from output_dir/checkpoint. The DCOCO drafter is written to output_dir/drafter, the loss curve,
candidate recall and timings to output_dir/training_log.json.
"""

from __future__ import annotations

import json

from command_line import library_module

config_module = library_module("hf_specdec.training.config")  # standard library only: --help stays instant


def build_parser():
    """The command line: CorrectorTrainingConfig's fields (an HfArgumentParser, defaults shown)."""
    return config_module.argument_parser(config_module.CorrectorTrainingConfig, description=__doc__)


def main(argv: list[str] | None = None) -> None:
    (config,) = build_parser().parse_args_into_dataclasses(argv)
    from hf_specdec.training.run import run  # torch and transformers: after the arguments

    out = run(config)
    log = json.loads((out.parent / "training_log.json").read_text())
    print(f"DCOCO drafter written to {out}; candidate recall {log['candidate_recall']:.3f}")


if __name__ == "__main__":
    main()
