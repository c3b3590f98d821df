"""Copy a trained drafter into the repository (bf16 safetensors) with a record of how it was made.

    python scripts/ship_drafter.py --run runs/qwen1.5b-b8 --name qwen2.5-coder-1.5b --command "python scripts/..."
    # and publish it with a model card (needs a Hub token with write access):
    python scripts/ship_drafter.py ... --push_to_hub me/qwen2.5-coder-1.5b-drafter \
        --target_id Qwen/Qwen2.5-Coder-1.5B-Instruct --benchmark_json results/default-t0/benchmark.json

Takes the finished drafter (run/drafter) or, if training was stopped early, the last checkpoint (run/checkpoint),
writes drafters/NAME/{config.json, model.safetensors, TRAINING.md, loss.png} and replaces what was there.
Refuses checkpoints over 64 MiB. With --push_to_hub it then uploads that folder with a model card in one commit
(`hf_specdec.hub.publish_drafter`); a drafter trained from a local target folder needs --target_id.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch

from hf_specdec import BlockDrafter
from hf_specdec.hub import publish_drafter
from hf_specdec.hub.publish import resolve_target

LIMIT = 64 * 2**20


def data_tokens(folder: Path) -> int:
    """Tokens in a run's cached training sequences (reads only the id tensors)."""
    from safetensors import safe_open

    total = 0
    for shard in folder.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as f:
            total += sum(f.get_slice(k).get_shape()[0] for k in f.keys() if k.endswith(".ids"))
    return total


def smoothed(values: list[float], width: int = 20) -> list[float]:
    out, acc = [], []
    for v in values:
        acc = (acc + [v])[-width:]
        out.append(sum(acc) / len(acc))
    return out


def write_plot(losses: list[list[float]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    steps, values = [s for s, _ in losses], [v for _, v in losses]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, values, alpha=0.3, label="loss")
    ax.plot(steps, smoothed(values), label="20-step mean")
    ax.set_xlabel("step")
    ax.set_ylabel("position-decayed CE")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="output_dir of scripts/train_drafter.py")
    parser.add_argument("--name", required=True, help="folder name under drafters/")
    parser.add_argument("--command", required=True, help="the exact training command, recorded in TRAINING.md")
    parser.add_argument(
        "--decoding",
        default=None,
        help="decode-time default saved with the drafter, as JSON (hf_specdec.DecodingSettings fields); default: "
        "keep the one the replaced drafter had",
    )
    parser.add_argument("--push_to_hub", default=None, metavar="REPO_ID", help="also publish to this Hub repo")
    parser.add_argument(
        "--target_id", default=None, help="Hub id of the target (default: the drafter config's, if it is a Hub id)"
    )
    parser.add_argument("--target_revision", default=None, help="target revision the drafter was trained on")
    parser.add_argument("--benchmark_json", default=None, help="benchmark.json of scripts/benchmark.py for the card")
    args = parser.parse_args()
    run = Path(args.run)
    source = run / "drafter" if (run / "drafter" / "config.json").exists() else run / "checkpoint"
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    data = json.loads((run / "data" / "index.json").read_text())
    drafter = BlockDrafter.from_pretrained(source, dtype=torch.bfloat16)
    if args.push_to_hub:  # refuse before replacing drafters/NAME if the card could not name the target
        resolve_target(drafter.config.to_dict(), args.target_id)
    out = Path("drafters") / args.name
    previous = out / "config.json"
    if args.decoding is not None:
        drafter.decoding = json.loads(args.decoding)
    elif previous.exists() and json.loads(previous.read_text()).get("decoding"):
        drafter.decoding = json.loads(previous.read_text())["decoding"]  # a measured default survives retraining
    shutil.rmtree(out, ignore_errors=True)
    drafter.save_pretrained(out)
    size = (out / "model.safetensors").stat().st_size
    if size > LIMIT:
        shutil.rmtree(out)
        raise SystemExit(f"{size / 2**20:.1f} MiB is over the 64 MiB limit; train a smaller drafter")
    losses = state["losses"]
    head = [v for _, v in losses[:20]]
    tail = [v for _, v in losses[-20:]]
    plotted = write_plot(losses, out / "loss.png")
    cfg = drafter.config
    tokens = data_tokens(run / "data")
    (out / "TRAINING.md").write_text(
        f"# {args.name} drafter\n\n"
        f"Reproduce:\n\n```bash\n{args.command}\n```\n\n"
        f"- source: `{source.name}` of the run after {state['step']} optimizer steps "
        f"({state['elapsed_s'] / 60:.1f} min of training steps)\n"
        f"- data: {data['sequences']} sequences, {tokens:,} tokens; "
        f"{state['supervised_tokens']:,} supervised block tokens seen\n"
        f"- drafter: {cfg.num_hidden_layers} layer(s), block {cfg.block_size}, taps {cfg.target_layer_ids}, "
        f"draft vocabulary {cfg.draft_vocab_size}, {size / 2**20:.1f} MiB bf16\n"
        f"- loss (position-decayed CE): first 20 steps {sum(head) / len(head):.3f}, "
        f"last 20 steps {sum(tail) / len(tail):.3f}\n" + ("\n![loss](loss.png)\n" if plotted else "")
    )
    print(f"wrote {out} ({size / 2**20:.1f} MiB)")
    if args.push_to_hub:
        log = {  # the figures TRAINING.md reports, from the same trainer state
            "steps": state["step"],
            "train_seconds": state["elapsed_s"],
            "supervised_tokens": state["supervised_tokens"],
            "losses": losses,
            "sequences": data["sequences"],
            "sequence_tokens": tokens,
        }
        sha = publish_drafter(
            out,
            args.push_to_hub,
            target_id=args.target_id,
            target_revision=args.target_revision,
            benchmark_json=args.benchmark_json,
            training_log=log,
            recipe=args.command,
        )
        print(f"published {out} to {args.push_to_hub} at revision {sha}")


if __name__ == "__main__":
    main()
