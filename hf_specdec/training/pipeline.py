"""The whole training run: target, drafter, data (cached), trainer, final drafter. Used by scripts/train_drafter.py."""

from __future__ import annotations

import json
from dataclasses import MISSING, fields
from pathlib import Path

import torch
from accelerate import PartialState
from transformers import AutoModelForCausalLM, AutoTokenizer

from ..models.block_drafter.modeling_block_drafter import BlockDrafter
from ..models.loading import load_drafter
from .config import DistillationConfig, DrafterTrainingConfig
from .corpora import corpus_prompts
from .data import (
    TrainingSequence,
    build_sequences,
    encode_prompt,
    encode_text,
    generate_continuations,
    load_sequences,
)
from .trainer import DrafterTrainer

ON_POLICY_COUNTERS = ("trunk_labels", "target_tokens", "branch_tokens", "target_passes", "target_seconds", "loss_terms")


def device_and_dtype(config: DrafterTrainingConfig) -> tuple[torch.device, torch.dtype]:
    cuda = torch.cuda.is_available() if config.device == "auto" else config.device == "cuda"
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda but no CUDA device is visible; use device=cpu")
    dtype = torch.float32 if config.dtype == "float32" else torch.bfloat16
    return torch.device("cuda" if cuda else "cpu"), dtype


def load_target(config: DrafterTrainingConfig):
    """The frozen target (on the configured device, in the training dtype) and its tokenizer (None if it has none:
    a data_file of token ids needs none)."""
    device, dtype = device_and_dtype(config)
    if config.target_quantization:
        from transformers import BitsAndBytesConfig

        quant = (
            BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)  # per-token exact (see validation.py)
            if config.target_quantization == "8bit"
            else BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=dtype, bnb_4bit_quant_type="nf4")
        )
        target = AutoModelForCausalLM.from_pretrained(
            config.target, dtype=dtype, quantization_config=quant, device_map={"": str(device)}
        ).eval()
    else:
        target = AutoModelForCausalLM.from_pretrained(config.target, dtype=dtype).to(device).eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(config.target)
    except (OSError, ValueError):
        tokenizer = None
    return target, tokenizer


def build_drafter(config: DrafterTrainingConfig, target) -> BlockDrafter:
    """The drafter to train, in float32 (master weights): loaded from `config.drafter` or fresh for the target."""
    if config.drafter:
        drafter = load_drafter(config.drafter, dtype=torch.float32)
    else:
        torch.manual_seed(config.seed)
        extra = {"intermediate_size": config.intermediate_size} if config.intermediate_size else {}
        drafter = BlockDrafter.for_target(
            target,
            mask_token_id=config.mask_token_id,
            block_size=config.block_size,
            num_hidden_layers=config.num_hidden_layers,
            num_target_taps=config.num_target_taps,
            target_name_or_path=config.target,
            **extra,
        )
    return drafter.to(device=target.device, dtype=torch.float32)


def _read_items(config: DrafterTrainingConfig, tokenizer) -> tuple[list[list[int]], list[tuple[list[int], int]]]:
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


def prepare_sequences(config: DrafterTrainingConfig, target, tokenizer, layer_ids: list[int]) -> list[TrainingSequence]:
    """Target continuations + features, computed once into output_dir/data (resumable) and reused afterwards."""
    folder = Path(config.data_dir) if config.data_dir else Path(config.output_dir) / "data"
    key = {
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
    folder.mkdir(parents=True, exist_ok=True)
    key_file, index = folder / "key.json", folder / "index.json"
    saved = json.loads(key_file.read_text()) if key_file.exists() else None
    if index.exists() and saved is None:
        saved = json.loads(index.read_text()).get("key")
    if saved is not None and saved != key:
        raise ValueError(f"{folder} holds data made with other settings ({saved}); use another output_dir")
    key_file.write_text(json.dumps(key))
    if index.exists():
        return load_sequences(folder)
    items_file = folder / "items.json"
    if items_file.exists():
        items = [tuple(x) for x in json.loads(items_file.read_text())]
    else:
        prompts, items = _read_items(config, tokenizer)
        if prompts:
            pad = tokenizer.pad_token_id if tokenizer is not None and tokenizer.pad_token_id is not None else 0
            items += generate_continuations(target, prompts, config.max_new_tokens, config.generation_batch_size, pad)
        items_file.write_text(json.dumps(items))
    sequences = build_sequences(
        target, items, layer_ids, config.max_length, folder, target_labels=config.label_source == "target_argmax"
    )
    index.write_text(json.dumps({"sequences": len(sequences), "key": key}))
    return sequences


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


def trainer_class(config: DrafterTrainingConfig) -> type[DrafterTrainer]:
    objective = getattr(config, "objective", "dflash")
    if objective == "specopd":
        from .specopd import SpecOPDTrainer

        return SpecOPDTrainer
    if objective == "sequential_opd":
        from .sequential_opd import SequentialOPDTrainer

        return SequentialOPDTrainer
    return DrafterTrainer


def run_training(config: DrafterTrainingConfig | DistillationConfig) -> Path:
    """Train and save the drafter (target dtype) to output_dir/drafter (plus output_dir/adapter with LoRA); write
    output_dir/training_log.json; publish when `push_to_hub` is set. Runs under `accelerate launch` too."""
    target, tokenizer = load_target(config)
    drafter = build_drafter(config, target)
    # one process writes the data cache, the others then read it
    with PartialState(cpu=target.device.type == "cpu").main_process_first():
        sequences = prepare_sequences(config, target, tokenizer, drafter.config.target_layer_ids)
    if config.draft_vocab_size and drafter.draft_vocab is None:
        drafter.set_draft_vocab(frequent_labels(sequences, config.draft_vocab_size))
    adapters = None
    if config.lora_rank:
        from .lora import add_lora

        adapters = add_lora(drafter, config, config.drafter)
    trainer = trainer_class(config)(config, target, drafter, sequences)
    extra = {
        "objective": getattr(config, "objective", "dflash"),
        "sequence_tokens": sum(int(s.ids.shape[0]) for s in sequences),
        "trainable_parameters": sum(p.numel() for p in drafter.parameters() if p.requires_grad),
        "processes": trainer.processes.num_processes,
    }
    return train_and_save(config, trainer, len(sequences), extra, adapters=adapters)


def train_and_save(
    config: DrafterTrainingConfig,
    trainer: DrafterTrainer,
    num_sequences: int,
    extra_log: dict,
    supervised_key: str = "supervised_tokens",
    adapters=None,
) -> Path:
    """Resume if asked, train, save the drafter (target dtype) to output_dir/drafter and write
    output_dir/training_log.json (steps, time, supervised count, losses, plus `extra_log`). With LoRA `adapters`
    the adapter alone goes to output_dir/adapter and the merged drafter to output_dir/drafter. Only the main
    process writes; `push_to_hub` publishes the drafter with its card afterwards."""
    resumed = config.resume and trainer.resume()
    state = trainer.train()
    drafter, target = trainer.drafter, trainer.target
    out = Path(config.output_dir) / "drafter"
    if not trainer.processes.is_main_process:
        return out
    if adapters is not None:
        from .lora import merge_lora, save_adapter

        save_adapter(adapters, Path(config.output_dir) / "adapter")
        drafter = merge_lora(adapters)
    drafter.requires_grad_(True)  # heads were trained with a frozen backbone; the saved model is whole
    drafter.to(target.dtype).save_pretrained(out)
    log = {
        "resumed": bool(resumed),
        "steps": state["step"],
        "train_seconds": state["elapsed_s"],
        supervised_key: state["supervised_tokens"],
        **extra_log,
        "sequences": num_sequences,
        "losses": state["losses"],
        "device": str(target.device),
        "dtype": str(target.dtype),
    }
    log.update(
        {
            k: state[k]
            for k in ("trunk_labels", "target_tokens", "branch_tokens", "target_passes", "loss_terms")
            if k in state
        }
    )
    (Path(config.output_dir) / "training_log.json").write_text(json.dumps(log, indent=1))
    if config.push_to_hub:
        publish(config, out)
    return out


def publish(config: DrafterTrainingConfig, drafter_dir: Path) -> str:
    """Upload the trained drafter with a generated card (the local copy stays as it is, whatever happens)."""
    from ..hub import publish_drafter

    run = Path(config.output_dir)
    return publish_drafter(
        drafter_dir,
        config.push_to_hub,
        target_id=config.hub_target_id,
        target_revision=config.hub_target_revision,
        training_log=run / "training_log.json",
        recipe=recipe_command(config),
    )


def recipe_command(config: DrafterTrainingConfig) -> str:
    """The training command line of this run: the settings that differ from their defaults (no secrets live in
    the config)."""
    parts = ["python scripts/train_drafter.py"]
    for f in fields(config):
        value = getattr(config, f.name)
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        if f.name in ("push_to_hub", "resume") or value == default:
            continue
        parts.append(f"--{f.name} " + (" ".join(map(str, value)) if isinstance(value, list) else str(value)))
    return " ".join(parts)


__all__ = [
    "build_drafter",
    "device_and_dtype",
    "frequent_labels",
    "load_target",
    "prepare_sequences",
    "publish",
    "recipe_command",
    "run_training",
    "trainer_class",
    "train_and_save",
]
