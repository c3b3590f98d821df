"""What a saved PARD folder must be before it loads, each refused with a message naming the folder and the problem:
its config (a bad one says what is wrong in which config.json), its weights (safetensors: a pickle is refused, never
skipped, which would load the base LM without them), its draft vocabulary, and the base LM it sits on (the one its
`base_config` describes, not another)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedConfig, PreTrainedModel

from ..checkpoints import read_safetensors
from ..draft_vocab import draft_vocab_problem, vocab_bound

PICKLES = {  # pickled weight files -> the safetensors file hf_specdec reads instead
    "pytorch_model*.bin": "model.safetensors",
    "adapter_model.bin": "adapter_model.safetensors",
}
BASE_SHAPE = ("num_hidden_layers", "vocab_size", "hidden_size")  # what the base LM must share with base_config


def folder_config(config_class: type[PreTrainedConfig], folder: str | Path) -> PreTrainedConfig:
    """`config_class.from_pretrained(folder)`; a config it refuses raises naming the folder's config.json."""
    try:
        return config_class.from_pretrained(folder)
    except (TypeError, ValueError) as err:
        error = TypeError if isinstance(err, TypeError) else ValueError
        raise error(f"the PARD drafter config {Path(folder) / 'config.json'} is unusable: {err}") from err


def refuse_pickled_weights(folder: str | Path) -> None:
    """ValueError when `folder` keeps weights only as a pickle (pytorch_model.bin, adapter_model.bin): hf_specdec
    loads safetensors only (unpickling can run code), and loading on without them would silently give the base LM."""
    folder = Path(folder)
    for pattern, safe in PICKLES.items():
        pickles = sorted(p.name for p in folder.glob(pattern))
        has_safe = any(folder.glob(safe.replace(".safetensors", "*.safetensors")))
        if pickles and not has_safe:
            raise ValueError(
                f"{folder} keeps its weights as a pickle ({', '.join(pickles)}), which hf_specdec does not load "
                f"(unpickling can run code), and without it the drafter would be the base LM alone. Convert it to "
                f"{safe}: `from safetensors.torch import save_file; save_file({{k: v.clone() for k, v in "
                f"torch.load('{pickles[0]}', weights_only=True).items()}}, '{safe}')` in that folder, or re-save "
                "the drafter with `save_pretrained` / `save_adapter_folder`."
            )


def check_base_matches(lm: PreTrainedModel, config: PreTrainedConfig, where: str, folder: str | Path | None) -> None:
    """ValueError when the base LM loaded from `where` is not the LM `config.base_config` describes (another layer
    count, vocabulary or width): the folder's adapter or draft settings would sit on the wrong LM."""
    text = lm.config.get_text_config()
    recorded = config.base_config or {}
    differ = [
        name
        for name in BASE_SHAPE
        if name in recorded and getattr(text, name, None) is not None and getattr(text, name) != recorded[name]
    ]
    if not differ:
        return
    names = ", ".join(f"{name} {getattr(text, name)}" for name in differ)
    saved = ", ".join(f"{name} {recorded[name]}" for name in differ)
    source = f"the PARD drafter in {folder}" if folder is not None else "this PARD config"
    raise ValueError(
        f"the base LM at {where} ({names}) is not the LM {source} was built over ({saved}, its config.json's "
        f"base_config). Set base_model in its config.json to the LM it was built from (now {config.base_model!r}), "
        "or build the drafter again over this LM."
    )


def read_draft_vocab(file: Path, config: PreTrainedConfig) -> torch.LongTensor:
    """The ids saved in an adapter folder's draft_vocab.safetensors, checked against the config; ValueError naming
    the file when they are unusable."""
    tensors = read_safetensors(file, "the draft vocabulary")
    ids = tensors.get("draft_vocab")
    if config.draft_vocab_size is None:
        problem = "its config.json sets no draft_vocab_size"
    elif ids is None:
        problem = f"it has no `draft_vocab` tensor (it holds {sorted(tensors)})"
    else:
        problem = draft_vocab_problem(ids, config.draft_vocab_size, vocab_bound(config))
    if problem:
        raise ValueError(
            f"the draft vocabulary {file} is unusable: {problem}. Save it again with `set_draft_vocab(token_ids)` "
            "and `save_adapter_folder`, or delete it and draft_vocab_size in config.json to score the whole "
            "vocabulary."
        )
    return ids


__all__ = ["check_base_matches", "folder_config", "read_draft_vocab", "refuse_pickled_weights"]
