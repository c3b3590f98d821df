"""The training sequences of a run: items read from data_file or the built-in corpora, target continuations and
features computed once into a data folder (keyed by the settings that made them, resumable), and the draft
vocabulary drawn from their labels."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .config import DrafterTrainingConfig
from .corpora import corpus_prompts
from .data import (
    TrainingSequence,
    build_sequences,
    encode_prompt,
    encode_text,
    generate_continuations,
    load_sequences,
)


def data_folder(config: DrafterTrainingConfig) -> Path:
    """Where the run's data is cached: data_dir, or output_dir/data."""
    return Path(config.data_dir) if config.data_dir else Path(config.output_dir) / "data"


def read_items(config: DrafterTrainingConfig, tokenizer) -> tuple[list[list[int]], list[tuple[list[int], int]]]:
    """Prompts still to be continued, and ready (ids, loss_start) items, from data_file or the built-in corpora."""
    if config.data_file is None:
        if not config.continue_prompts:
            texts = corpus_prompts(config.corpus, config.num_prompts, config.seed, texts=True)
            return [], [encode_text(tokenizer, t) for t in texts]
        return [encode_prompt(tokenizer, p) for p in corpus_prompts(config.corpus, config.num_prompts, config.seed)], []
    prompts, ready = [], []
    for line in Path(config.data_file).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        if "ids" in item:
            ready.append((list(item["ids"]), int(item.get("loss_start", 1))))
        elif "messages" in item or "prompt" in item:
            prompts.append(encode_prompt(tokenizer, item.get("messages", item.get("prompt"))))
        else:
            raise ValueError(f"data_file line without 'ids', 'messages' or 'prompt': {line[:80]}")
    return prompts, ready


def data_key(config: DrafterTrainingConfig, layer_ids: list[int]) -> dict:
    """The settings the cached data depends on: a folder made with other ones is refused."""
    return {
        "target": config.target,
        "layer_ids": layer_ids,
        "data_file": config.data_file,
        "corpus": config.corpus,
        "num_prompts": config.num_prompts,
        "max_new_tokens": config.max_new_tokens,
        "max_length": config.max_length,
        "continue_prompts": config.continue_prompts,
        "label_source": config.label_source,
    }


def claim_folder(folder: Path, key: dict, chosen: bool = False) -> None:
    """Record `key` in `folder` (created if needed); refuse a folder holding data made with another key, naming the
    settings that differ. `chosen`: the folder was passed as --data_dir (else it is output_dir/data)."""
    folder.mkdir(parents=True, exist_ok=True)
    key_file, index = folder / "key.json", folder / "index.json"
    saved = json.loads(key_file.read_text()) if key_file.exists() else None
    if index.exists() and saved is None:
        saved = json.loads(index.read_text()).get("key")
    if saved is not None and saved != key:
        differ = [name for name in {**saved, **key} if saved.get(name, "<absent>") != key.get(name, "<absent>")]
        lines = "\n".join(f"  {n}: {saved.get(n, '<absent>')!r} there, {key.get(n, '<absent>')!r} now" for n in differ)
        if chosen:
            advice = (
                "To reuse this data, pass the values it was made with; for new data, point --data_dir at another "
                "folder (or leave it out: the data then goes to output_dir/data)."
            )
        else:
            advice = (
                "This output_dir holds an earlier run made with other data settings: pass the values it was made "
                "with to continue that run, or use another --output_dir for a new run."
            )
        raise ValueError(f"{folder} holds data made with other settings:\n{lines}\n{advice}")
    key_file.write_text(json.dumps(key))


def sequence_items(config: DrafterTrainingConfig, target, tokenizer, folder: Path) -> list[tuple[list[int], int]]:
    """(ids, loss_start) of every training item, prompts continued by the target; kept in folder/items.json."""
    items_file = folder / "items.json"
    if items_file.exists():
        return [tuple(x) for x in json.loads(items_file.read_text())]
    prompts, items = read_items(config, tokenizer)
    if prompts:
        pad = tokenizer.pad_token_id if tokenizer is not None and tokenizer.pad_token_id is not None else 0
        items += generate_continuations(target, prompts, config.max_new_tokens, config.generation_batch_size, pad)
    items_file.write_text(json.dumps(items))
    return items


def prepare_sequences(config: DrafterTrainingConfig, target, tokenizer, layer_ids: list[int]) -> list[TrainingSequence]:
    """Target continuations + features, computed once into output_dir/data (resumable) and reused afterwards."""
    folder, key = data_folder(config), data_key(config, layer_ids)
    claim_folder(folder, key, chosen=config.data_dir is not None)
    index = folder / "index.json"
    if index.exists():
        return load_sequences(folder)
    items = sequence_items(config, target, tokenizer, folder)
    sequences = build_sequences(
        target, items, layer_ids, config.max_length, folder, target_labels=config.label_source == "target_argmax"
    )
    index.write_text(json.dumps({"sequences": len(sequences), "key": key}))
    return sequences


def data_adjustments(config: DrafterTrainingConfig, sequences: list[TrainingSequence]) -> list[str]:
    """Sentences on what the data source gave fewer of than asked (prompts the corpora did not supply, items left
    with fewer than 2 tokens to supervise within max_length), with the reasons; [] when all was used."""
    items_file = data_folder(config) / "items.json"
    if not items_file.exists():
        return []
    items = json.loads(items_file.read_text())
    asked = f"--num_prompts {config.num_prompts}" if config.data_file is None else f"--data_file {config.data_file}"
    notes = []
    if config.data_file is None and len(items) < config.num_prompts:
        notes.append(
            f"{asked} asked, {len(items)} read: the corpora (--corpus {' '.join(config.corpus)}) gave only "
            f"{len(items)} usable ones (ShareGPT conversations without a reply, or past the first 4000 scanned, "
            "are skipped)."
        )
    if len(sequences) < len(items):
        long = sum(1 for _, start in items if max(start, 1) > config.max_length - 2)
        short = len(items) - len(sequences) - long
        why = []
        if long:
            why.append(f"{long} with a prompt that fills --max_length {config.max_length} (raise it to keep them)")
        if short:
            why.append(f"{short} with fewer than 2 tokens after the prompt (an empty or one-token answer)")
        notes.append(
            f"{len(items)} items read ({asked}), {len(sequences)} used for training: the others leave fewer than 2 "
            f"tokens to supervise: {'; '.join(why)}."
        )
    return notes


def frequent_labels(sequences: list[TrainingSequence], n: int) -> torch.LongTensor:
    """The `n` most frequent supervised labels (ties by id): the draft vocabulary."""
    counts: dict[int, int] = {}
    for seq in sequences:
        labels = seq.ids if seq.next_tokens is None else seq.next_tokens
        ids, freq = labels[max(seq.loss_start - 1, 0) :].unique(return_counts=True)
        for i, c in zip(ids.tolist(), freq.tolist(), strict=True):
            counts[i] = counts.get(i, 0) + c
    ranked = sorted(counts, key=lambda i: (-counts[i], i))[:n]
    return torch.tensor(sorted(ranked))


__all__ = [
    "claim_folder",
    "data_adjustments",
    "data_folder",
    "data_key",
    "frequent_labels",
    "prepare_sequences",
    "read_items",
    "sequence_items",
]
