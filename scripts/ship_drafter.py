"""Copy a trained drafter into the repository (bf16 safetensors) with a record of how it was made.

    python scripts/ship_drafter.py --run runs/qwen1.5b-b8 --name qwen2.5-coder-1.5b --command "python scripts/..."
    # and publish it with a model card (needs a Hub token with write access):
    python scripts/ship_drafter.py ... --push_to_hub me/qwen2.5-coder-1.5b-drafter \\
        --target_id Qwen/Qwen2.5-Coder-1.5B-Instruct --benchmark results/single-stream/2026-12-02-1152 \\
        --license apache-2.0

Takes the finished drafter (run/drafter) or, if training was stopped early, the last checkpoint (run/checkpoint),
writes drafters/NAME/{config.json, model.safetensors, TRAINING.md, loss.png} and replaces what was there (a PARD
run ships its LoRA adapter, adapter_config.json and its config naming the base model instead of full weights).
NAME is one folder name (letters, digits, '.', '-', '_'; no path separators, not '.' or '..'). Refuses checkpoints
over 64 MiB, before the drafter already there is touched. With --push_to_hub it then uploads that folder's weights,
config, TRAINING.md and loss.png with a model card in one commit (`hf_specdec.hub.publish_drafter`; --dry_run lists
them instead); a drafter trained from a local target folder needs --target_id. No local path goes up: the target's
folder becomes --target_id, an offline model its name, a path under the working directory a relative one. Without
--benchmark the card says it has no measured results.
All of it is `upkeep.ship.ship_drafter` (repository upkeep, outside the hf_specdec package).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="output_dir of scripts/train_drafter.py")
    parser.add_argument("--name", required=True, help="folder name under drafters/")
    parser.add_argument("--command", required=True, help="the exact training command, recorded in TRAINING.md")
    parser.add_argument(
        "--decoding",
        default=None,
        type=json.loads,
        help="decode-time default saved with the drafter, as JSON (hf_specdec.DecodingSettings fields); default: "
        "keep the one the replaced drafter had",
    )
    parser.add_argument("--push_to_hub", default=None, metavar="REPO_ID", help="also publish to this Hub repo")
    parser.add_argument(
        "--target_id", default=None, help="Hub id of the target (default: the drafter config's, if it is a Hub id)"
    )
    parser.add_argument("--target_revision", default=None, help="target revision the drafter was trained on")
    parser.add_argument(
        "--benchmark",
        "--benchmark_json",
        dest="benchmark",
        default=None,
        help="for the card's measured section: the folder scripts/benchmark.py wrote, or its benchmark.json or "
        "benchmark.md (default: none, and the card says it has no measured results)",
    )
    parser.add_argument("--license", default="apache-2.0", help="license id on the card (default: %(default)s)")
    parser.add_argument(
        "--dry_run", action="store_true", help="with --push_to_hub: list the files that would go up, send nothing"
    )
    parser.add_argument(
        "--draft_vocab_size", type=int, default=None, help="score only the first N token ids (and EOS): a cheaper head"
    )
    parser.add_argument(
        "--without_features",
        action="store_true",
        help="ship a PARD-2 run's drafter without its target-feature projection (it drafts from tokens alone, as "
        "its feature dropout trained it to)",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, which holds upkeep/
    from upkeep.ship import ship_drafter  # torch and transformers: after the arguments

    try:
        ship_drafter(
            args.run,
            args.name,
            args.command,
            decoding=args.decoding,
            push_to_hub=args.push_to_hub,
            target_id=args.target_id,
            target_revision=args.target_revision,
            benchmark=args.benchmark,
            license=args.license,
            dry_run=args.dry_run,
            draft_vocab_size=args.draft_vocab_size,
            without_features=args.without_features,
        )
    except ValueError as err:  # a bad --name, over the size limit, or nothing (safe) to publish with
        raise SystemExit(str(err)) from None


if __name__ == "__main__":
    main()
