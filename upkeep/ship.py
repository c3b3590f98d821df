"""Ship a trained drafter into the repository: drafters/NAME/{config.json, model.safetensors, TRAINING.md, loss.png}
copied from a training run (bf16 safetensors), with a record of how it was made, and optionally published.

This is what `scripts/ship_drafter.py` runs: repository upkeep, so it lives outside the hf_specdec package (and its
wheel). The source is the run's finished drafter (run/drafter, or run/adapter for a kind that ships as its adapter) or,
when training was stopped early, its last checkpoint (run/checkpoint) if that holds a whole drafter with its config (a
LoRA checkpoint holds the adapters alone: `--export_only` saves a drafter from it first); the figures in TRAINING.md
(steps, training time, data and supervised tokens, first and last losses) come from run/checkpoint/trainer_state.json
and the run's cached data (run/data), so the record describes exactly the weights shipped. Checkpoints over 64 MiB are
refused (the repository keeps drafters small). With `push_to_hub` the folder then goes up with a model card in one
commit (`publish_drafter`), and the card carries the same figures as TRAINING.md.

NAME must be one plain folder name (`check_name`), so the folder replaced is drafters/NAME and nothing else. The new
folder is written aside (drafters/.NAME.staging) and checked (size) before the old drafter is touched; then the two
are swapped.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch
from huggingface_hub import HfApi

from hf_specdec import BlockDrafter, load_drafter
from hf_specdec.hub.card import is_hub_id, read_benchmark
from hf_specdec.hub.portable import Portable
from hf_specdec.hub.publish import publish_drafter, resolve_target
from hf_specdec.hub.record import smoothed, write_plot
from hf_specdec.models.pard.modeling_pard import adapter_holds
from hf_specdec.models.registry import capabilities_of

LIMIT = 64 * 2**20  # bytes of model.safetensors (or the adapter) a shipped drafter may take
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")  # what an adapter-format drafter ships
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # one folder name: no separators, not '.', '..' or hidden


def check_name(name: str, drafters_dir: Path) -> Path:
    """`drafters_dir`/`name`, once `name` is known to be one plain folder name that stays inside `drafters_dir`."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(
            f"--name {name!r} is not a drafter folder name: use letters, digits, '.', '-' and '_', starting with a "
            f"letter or digit (no path separators, not '.' or '..'), e.g. 'qwen2.5-coder-1.5b'; it names the folder "
            f"{drafters_dir}/NAME that is replaced."
        )
    out = drafters_dir / name
    if out.is_symlink() or out.resolve().parent != drafters_dir.resolve():
        raise ValueError(f"{out} leads outside {drafters_dir} (a symlink); refusing to replace it.")
    return out


def data_tokens(folder: Path) -> int:
    """Tokens in a run's cached training sequences (reads only the id tensors)."""
    from safetensors import safe_open

    total = 0
    for shard in folder.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as f:
            total += sum(f.get_slice(k).get_shape()[0] for k in f.keys() if k.endswith(".ids"))
    return total


def training_log(state: dict, data: dict, tokens: int, adjustments: list[str] = ()) -> dict:
    """The run's figures, from its trainer state and data index: what TRAINING.md reports and the card shows;
    `adjustments`: the sentences on settings the run clamped or adjusted."""
    return {
        "adjustments": list(adjustments),
        "steps": state["step"],
        "train_seconds": state["elapsed_s"],
        "supervised_tokens": state["supervised_tokens"],
        "losses": state["losses"],
        "sequences": data["sequences"],
        "sequence_tokens": tokens,
    }


def describe(drafter, size: int) -> str:
    """One line on what the shipped drafter is."""
    cfg = drafter.config
    if capabilities_of(drafter).adapter_folders:  # an adapter over a base LM (PARD)
        return (
            f"PARD over `{cfg.base_model}` (LoRA adapter + mask token {cfg.mask_token_id}), block {cfg.block_size}, "
            f"draft vocabulary {cfg.draft_vocab_size}, adapter {size / 2**20:.1f} MiB"
        )
    return (
        f"{cfg.num_hidden_layers} layer(s), block {cfg.block_size}, taps {cfg.target_layer_ids}, "
        f"draft vocabulary {cfg.draft_vocab_size}, {size / 2**20:.1f} MiB bf16"
    )


def training_record(
    name: str, command: str, source: Path, log: dict, drafter: BlockDrafter, size: int, dropped: str = ""
) -> str:
    """TRAINING.md's text (without the plot): the command that reproduces the drafter and the run's figures;
    `dropped`: the sentence on what the run trained that is not shipped (its target-feature projection)."""
    head = [v for _, v in log["losses"][:20]]
    tail = [v for _, v in log["losses"][-20:]]
    return (
        f"# {name} drafter\n\n"
        f"Reproduce:\n\n```bash\n{command}\n```\n\n"
        f"- source: `{source.name}` of the run after {log['steps']} optimizer steps "
        f"({log['train_seconds'] / 60:.1f} min of training steps)\n"
        f"- data: {log['sequences']} sequences, {log['sequence_tokens']:,} tokens; "
        f"{log['supervised_tokens']:,} supervised block tokens seen\n"
        f"- drafter: {describe(drafter, size)}\n"
        f"- loss: first 20 steps {sum(head) / len(head):.3f}, "
        f"last 20 steps {sum(tail) / len(tail):.3f}\n"
        + "".join(f"- adjusted: {sentence}\n" for sentence in log.get("adjustments", []))
        + (f"- not shipped: {dropped}\n" if dropped else "")
    )


def save_drafter(drafter: BlockDrafter, out: Path, decoding: dict | None, previous: Path | None = None) -> int:
    """Save `drafter` to the new folder `out` and return the bytes of its weights; ValueError (and `out` removed)
    over LIMIT.

    The decode-time default is `decoding` if given, else the one of the drafter at `previous` (the folder it will
    replace): a measured default survives retraining.
    """
    config = previous / "config.json" if previous is not None else None
    if decoding is not None:
        drafter.decoding = decoding
    elif config is not None and config.exists() and json.loads(config.read_text()).get("decoding"):
        drafter.decoding = json.loads(config.read_text())["decoding"]
    if capabilities_of(drafter).adapter_folders:  # PARD: its config, draft vocabulary and the run's adapter files
        drafter.save_adapter_folder(out)
        for file in ADAPTER_FILES:
            shutil.copyfile(Path(drafter.name_or_path) / file, out / file)
        size = (out / "adapter_model.safetensors").stat().st_size
    else:
        drafter.save_pretrained(out)
        size = (out / "model.safetensors").stat().st_size
    if size > LIMIT:
        shutil.rmtree(out)
        raise ValueError(
            f"{size / 2**20:.1f} MiB is over the {LIMIT / 2**20:.0f} MiB limit; train a smaller drafter (the drafter "
            "already shipped under this name is unchanged)"
        )
    return size


def drop_features(drafter, source: Path, state: dict) -> str:
    """Remove the target-feature projection of a PARD-2 run's `drafter` (loaded from `source`) and return the
    sentence TRAINING.md gives on it; ValueError if it has none, or if its LoRA adapter file holds the projection
    (a run that trained features from the start: the copied adapter would still carry it)."""
    if getattr(drafter, "feature_proj", None) is None:
        raise ValueError(
            f"--without_features: the drafter in {source} reads no target features; ship it without the flag"
        )
    if adapter_holds(source, "feature_proj"):
        raise ValueError(
            f"--without_features: {source}/adapter_model.safetensors holds the target-feature projection itself; "
            "only a run whose projection is saved beside its adapter (trained on from an adapter without features) "
            "can ship without it"
        )
    layers, dropout = drafter.config.target_layer_ids, state.get("arguments", {}).get("feature_dropout")
    drafter.remove_feature_injection()
    trained = f" with feature dropout {dropout}" if dropout is not None else ""
    return (
        f"the projection of target layers {layers} the run trained{trained}; this drafter reads no target features "
        "and drafts from tokens alone"
    )


def swap_in(staging: Path, out: Path) -> None:
    """Put the complete folder `staging` at `out`, replacing what was there (renames within one folder)."""
    old = out.with_name(f".{out.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def ship_drafter(
    run: str | Path,
    name: str,
    command: str,
    *,
    decoding: dict | None = None,
    push_to_hub: str | None = None,
    target_id: str | None = None,
    target_revision: str | None = None,
    benchmark: str | Path | None = None,
    benchmark_json: str | Path | None = None,
    license: str = "apache-2.0",
    drafters_dir: str | Path = "drafters",
    dry_run: bool = False,
    draft_vocab_size: int | None = None,
    without_features: bool = False,
) -> Path:
    """Copy the drafter of the training run `run` to `drafters_dir`/`name` in bf16 with TRAINING.md (recording
    `command` and the run's figures) and loss.png (if matplotlib is installed); return that folder.

    Args:
        run: output_dir of a training run (scripts/train_drafter.py): drafter/ or checkpoint/, data/; a run whose
            adapter/ holds a drafter config (PARD) ships that adapter with its config instead of full weights.
        decoding: decode-time default saved with the drafter (DecodingSettings fields); default: the replaced one's.
        push_to_hub: also publish the folder to this Hub repo with a model card (`publish_drafter`).
        target_id, target_revision, benchmark, license: for the card, see `publish_drafter` (`benchmark`: the
            folder scripts/benchmark.py wrote, or its benchmark.json / benchmark.md; `benchmark_json`: former name).
        dry_run: with `push_to_hub`, print the files that would be published instead of publishing them.
        draft_vocab_size: score only the first N token ids (and EOS) with the drafter's head: BPE vocabularies rank
            ids by merge frequency, so this keeps the common tokens and cuts the head's cost (lossless).
        without_features: ship a PARD-2 run's drafter without its target-feature projection (it drafts from tokens
            alone, as the run's feature dropout trained it to); TRAINING.md says what was left out.

    Raises:
        ValueError: `name` is not one plain folder name, the weights are over 64 MiB, or `push_to_hub` is set and
            is no repo id or the target's Hub id is unknown, or the run has no saved drafter (a run stopped
            before its end whose checkpoint holds only trained weights, e.g. LoRA: `--export_only` saves one), or
            `without_features` is set and the run's drafter reads no target features or keeps their projection
            inside its LoRA adapter file; all checked before `drafters_dir`/`name` is touched.
    """
    drafters_dir, run = Path(drafters_dir), Path(run)
    out = check_name(name, drafters_dir)
    if push_to_hub and not is_hub_id(push_to_hub):
        raise ValueError(f"--push_to_hub {push_to_hub!r} is not a Hub repo id; pass 'namespace/name'.")
    benchmark = read_benchmark(benchmark if benchmark is not None else benchmark_json)  # a bad path fails now
    if (run / "adapter" / "config.json").exists():  # a drafter kind that ships as its adapter (PARD)
        source = run / "adapter"
    else:
        source = run / "drafter" if (run / "drafter" / "config.json").exists() else run / "checkpoint"
    if not (source / "config.json").exists():
        raise ValueError(
            f"{run} holds no drafter to ship: neither {run}/drafter nor {run}/adapter was saved, and {run}/checkpoint "
            "holds only the trained weights (no config.json). Save the drafter first: run the run's training command "
            f"again with --export_only added (it saves the checkpoint's drafter into {run}), then ship again."
        )
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    data = json.loads((run / "data" / "index.json").read_text())
    run_log = run / "training_log.json"
    adjustments = json.loads(run_log.read_text()).get("adjustments", []) if run_log.is_file() else []
    drafter = load_drafter(source, dtype=torch.bfloat16)
    drafter.name_or_path = str(source)
    dropped = drop_features(drafter, source, state) if without_features else ""
    if draft_vocab_size is not None:  # the head scores the first N ids (BPE ids rank by frequency) and EOS
        lm_config = drafter.lm.config if capabilities_of(drafter).own_embeddings else drafter.config
        eos = getattr(lm_config, "eos_token_id", None)
        extra = [eos] if isinstance(eos, int) else list(eos or [])
        drafter.set_draft_vocab(torch.cat([torch.arange(draft_vocab_size), torch.tensor(extra, dtype=torch.long)]))
    hub_target = target_id
    if push_to_hub:  # refuse before replacing the folder if the card could not name the target
        hub_target = resolve_target(drafter.config.to_dict(), target_id)
    local_target = drafter.config.to_dict().get("target_name_or_path")
    known = {str(local_target): hub_target} if local_target and hub_target else {}
    command = Portable(known=known).text(command)  # TRAINING.md names no local path either
    staging = drafters_dir / f".{name}.staging"  # names of the form NAME never start with a dot
    shutil.rmtree(staging, ignore_errors=True)
    try:
        size = save_drafter(drafter, staging, decoding, previous=out)
        log = training_log(state, data, data_tokens(run / "data"), adjustments)
        plotted = write_plot(log["losses"], staging / "loss.png")
        record = training_record(name, command, source, log, drafter, size, dropped)
        (staging / "TRAINING.md").write_text(record + ("\n![loss](loss.png)\n" if plotted else ""))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    swap_in(staging, out)
    print(f"wrote {out} ({size / 2**20:.1f} MiB)")
    if push_to_hub:
        sent = publish_drafter(
            out,
            push_to_hub,
            target_id=target_id,
            target_revision=target_revision,
            benchmark=benchmark,
            training_log=log,
            recipe=command,
            license=license,
            dry_run=dry_run,
        )
        if dry_run:
            print(f"would publish {out} to {push_to_hub}: {', '.join(sent)}")
        else:
            url = f"{HfApi().endpoint}/{push_to_hub}/tree/{sent}"
            print(f"published {out} to {push_to_hub} at revision {sent}: {url}")
    return out


__all__ = [
    "LIMIT",
    "check_name",
    "data_tokens",
    "ship_drafter",
    "smoothed",
    "training_log",
    "training_record",
    "write_plot",
]
