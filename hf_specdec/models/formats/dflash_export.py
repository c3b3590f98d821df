"""Export a saved drafter to a published DFlash layout (z-lab's, transformers' native, speculators') and prove the
export: the folder must read back as the same drafter. This is what `scripts/export_drafter.py` runs.

`export_dflash` (dflash.py), `export_native_dflash` (native_dflash.py) and `export_speculators` (speculators.py)
write the layouts; this module adds what a user exporting a checkpoint folder needs around them: refusing what is
not a block drafter (a target model, an unrelated checkpoint) before anything is written, refusing a non-empty
output folder (old files would mix with the export), loading the target when the layout ships some of it (a reduced
draft vocabulary's LM-head rows; speculators: embeddings and LM head), and reloading the export to check that block
size, mask, taps, draft vocabulary and backbone weights all survived.

Drafters load through the registry, like `hf_specdec.load_drafter` (which sits above the formats and cannot be
imported from here): a block drafter with a DCOCO or DBLAST head loads with it and only its block backbone is
exported (with a warning); a checkpoint in any published DFlash layout loads as a `BlockDrafter`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.utils import logging as transformers_logging

from ..block_drafter.configuration_block_drafter import BlockDrafterConfig
from ..block_drafter.modeling_block_drafter import BlockDrafter
from ..checkpoints import read_config_dict
from ..registry import kind_for_config, published_format
from .dflash import export_dflash, is_dflash_config
from .native_dflash import export_native_dflash
from .speculators import export_speculators

EXPORTS = {"dflash": export_dflash, "native": export_native_dflash, "speculators": export_speculators}


def load_block_drafter(path: str | os.PathLike) -> BlockDrafter:
    """The drafter at `path` (ours, DCOCO, DBLAST or a checkpoint in a published DFlash layout); anything else is a
    ValueError.

    Checking the config first turns "this is a target model" into a clear refusal instead of a from_pretrained
    error about missing drafter weights.
    """
    raw = read_config_dict(path) if os.path.isdir(path) else None
    if published_format(raw, BlockDrafterConfig.model_type) is not None:  # native or speculators: no Auto config
        return BlockDrafter.from_pretrained(path).eval()
    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read a drafter config at {path}: {err}") from err
    if not isinstance(config, BlockDrafterConfig) and not is_dflash_config(config.to_dict()):
        raise ValueError(
            f"{path} is not a block drafter (its config says model_type {config.model_type!r}); "
            "export_drafter.py exports hf_specdec drafters (block, DCOCO, DBLAST) and DFlash checkpoints."
        )
    kind = kind_for_config(config)  # None for a DFlash checkpoint: BlockDrafter converts it
    if kind is None:
        return BlockDrafter.from_pretrained(path).eval()
    return kind.model_class.from_pretrained(path, config=config).eval()  # a head's shape read as it was saved


def same_drafter(a: BlockDrafter, b: BlockDrafter) -> bool:
    """Same block size, mask, taps, draft vocabulary and backbone weights (b may lack a's DCOCO/DBLAST head)."""
    keys = ("block_size", "mask_token_id", "target_layer_ids", "draft_vocab_size")
    if any(getattr(a.config, k) != getattr(b.config, k) for k in keys):
        return False
    ours, theirs = a.state_dict(), b.state_dict()
    return set(theirs) <= set(ours) and all(torch.equal(ours[name], t) for name, t in theirs.items())


@contextmanager
def expected_load_report_silenced() -> Iterator[None]:
    """Load with transformers' warnings off, errors still shown.

    Reading an export back, transformers reports `draft_vocab` as MISSING and "newly initialized" (the layout keeps
    it as `d2t` offsets, restored after loading), which reads like a failure after a successful export. A tensor
    really missing or left over is refused by the loader's own checks (`load_checked`), which raise."""
    level = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers_logging.set_verbosity(level)


def export_and_check(
    drafter_path: str | os.PathLike,
    output: str | os.PathLike,
    target_path: str | os.PathLike | None = None,
    format: str = "dflash",
) -> Path:
    """Export the drafter at `drafter_path` to the new (or empty) folder `output` in `format` ("dflash": z-lab's,
    "native": transformers', "speculators"), check the round trip, print a one-line summary with how to serve it,
    return `output`.

    `target_path` (a target model folder or Hub id) is needed when the drafter scores a reduced draft vocabulary, and
    always for "speculators" (the layout ships the target's embeddings and LM head; the verifier it names is the
    drafter's recorded target, else `target_path`). Raises ValueError for a non-empty output, a checkpoint that is
    not a block drafter, a missing target, what the layout cannot hold, and an export that does not load back as the
    same drafter.
    """
    if format not in EXPORTS:
        raise ValueError(f"no DFlash layout named {format!r}; layouts: {sorted(EXPORTS)}")
    out = Path(output)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty; choose a new folder (old files would mix with the export)")
    drafter = load_block_drafter(drafter_path)
    target = None
    if target_path is not None:
        target = AutoModelForCausalLM.from_pretrained(target_path, dtype=drafter.dtype).eval()
    elif format == "speculators":
        raise ValueError("the speculators layout ships the target's embeddings and LM head; pass --target PATH.")
    elif drafter.config.draft_vocab_size is not None and format == "dflash":
        raise ValueError(
            f"this drafter scores a {drafter.config.draft_vocab_size}-token draft vocabulary; pass --target PATH so "
            "the export can include those rows of the target's LM head (vLLM needs them)."
        )
    options = {"verifier_name_or_path": drafter.config.target_name_or_path or str(target_path)}
    EXPORTS[format](drafter, out, target=target, **(options if format == "speculators" else {}))
    with expected_load_report_silenced():
        reloaded = BlockDrafter.from_pretrained(out)
    if not same_drafter(drafter, reloaded):
        raise ValueError(f"{out} does not load back as the same drafter; please report this as a bug")
    print(f"wrote {out}: {_summary(drafter.config, format)}")
    return out


def _summary(cfg: BlockDrafterConfig, format: str) -> str:
    """What the export is and how to serve it, one line."""
    vocab = cfg.draft_vocab_size or "full"
    common = f"taps {cfg.target_layer_ids}, mask id {cfg.mask_token_id}, draft vocabulary {vocab}"
    if format == "native":
        return (
            f"transformers' native DFlash layout, block {cfg.block_size} (AutoModel.from_pretrained, then "
            f"generate(assistant_model=..., speculation_type='dflash')), {common}"
        )
    if format == "speculators":
        return (
            f"speculators DFlash layout, block {cfg.block_size} (vLLM reads method and num_speculative_tokens "
            f"{cfg.block_size - 1} from it), aux_hidden_state_layer_ids {[i + 1 for i in cfg.target_layer_ids]}, "
            f"{common}"
        )
    return (
        f"DFlash layout, block {cfg.block_size} (vLLM num_speculative_tokens {cfg.block_size - 1}, "
        f"SGLang --speculative-num-draft-tokens {cfg.block_size}), {common}"
    )


__all__ = ["EXPORTS", "expected_load_report_silenced", "export_and_check", "load_block_drafter", "same_drafter"]
