"""Print the model card of saved drafters without uploading anything: the README.md that `publish_drafter` (and a
drafter's `push_to_hub`) would send with each folder.

    python scripts/render_card.py drafters/qwen2.5-coder-1.5b-pard --target_id Qwen/Qwen2.5-Coder-1.5B-Instruct \\
        --benchmark results/single-stream/2026-12-02-1152

    python scripts/render_card.py drafters/qwen2.5-coder-1.5b-pard drafters/qwen2.5-coder-1.5b-pard-dblast \\
        --target_id Qwen/Qwen2.5-Coder-1.5B-Instruct --out cards.md

Each card is `hf_specdec.render_card(FOLDER, NAMESPACE/<folder name>, ...)`: the template of the drafter's kind from
hub_cards/, what its config and folder say (own LM head or the target's, target states read, adapter or full
weights, the backbone a head needs), its run record (TRAINING.md, loss plot, training log) and, with --benchmark,
a scripts/benchmark.py report for every folder named. Several folders print one after another, each after a
`<!-- card of FOLDER -->` line. Nothing is sent and no folder is changed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from command_line import HelpFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("folders", nargs="+", metavar="FOLDER", help="saved drafter folders (drafters/NAME, ...)")
    parser.add_argument(
        "--target_id", default=None, help="Hub id of the target (default: the drafter config's, if it is a Hub id)"
    )
    parser.add_argument("--target_revision", default=None, help="target revision the drafter was trained on")
    parser.add_argument("--namespace", default="me", help="the Hub namespace the usage snippet names")
    parser.add_argument(
        "--benchmark", default=None, help="a scripts/benchmark.py report (its folder, benchmark.json or .md)"
    )
    parser.add_argument(
        "--license", default=None, help="license id (default: the config's license field, else apache-2.0)"
    )
    parser.add_argument("--out", default=None, help="write the cards to this file instead of printing them")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from hf_specdec.hub import render_card  # torch and transformers: after the arguments
    from hf_specdec.hub.publish import resolve_target

    cards = []
    try:
        for name in args.folders:
            folder = Path(name)
            if not (folder / "config.json").is_file():
                raise ValueError(f"{folder} holds no config.json: name folders a drafter was saved to")
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            card = render_card(
                folder,
                f"{args.namespace}/{folder.resolve().name}",
                target_id=resolve_target(config, args.target_id),
                target_revision=args.target_revision or config.get("target_revision"),
                benchmark=args.benchmark,
                license=args.license,
            )
            cards.append(f"<!-- card of {name} -->\n{card.content}" if len(args.folders) > 1 else card.content)
    except ValueError as err:  # no drafter folder, no Hub id of the target, no benchmark report there
        raise SystemExit(str(err)) from None
    text = "\n".join(cards)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
