"""Export a block drafter in the published DFlash layout (z-lab), to serve it with vLLM or SGLang.

    python scripts/export_drafter.py --drafter drafters/qwen2.5-coder-1.5b --output exported/qwen2.5-coder-1.5b-dflash \
        --target ~/.cache/hf_specdec/models/qwen2.5-coder-1.5b

Writes OUTPUT/config.json (`"architectures": ["DFlashDraftModel"]`, `block_size`, `dflash_config` with
`mask_token_id` and `target_layer_ids`) and OUTPUT/model.safetensors (`fc`, `hidden_norm`, `layers.N.*`, `norm`),
reloads the folder with hf_specdec and checks that it gives back the same drafter.

- A drafter with a reduced draft vocabulary (`draft_vocab_size`, as the shipped one has) needs `--target`: the
  export adds `d2t`/`t2d` and the target LM-head rows it scores (`lm_head.weight`), which is how vLLM's DFlash
  loader reads a reduced vocabulary. SGLang ignores those tensors and drafts over the full vocabulary.
- DCOCO and DBLAST drafters: only their block backbone is exported, with a warning; the corrector and the mixture
  head are not part of the DFlash layout, so vLLM and SGLang draft with the backbone alone.
- Anything else (a target model, an unrelated checkpoint) is refused.

Layout checked against vLLM `vllm/model_executor/models/qwen3_dflash.py` @ 036a00d, `vllm/config/speculative.py`
@ 002e77c, `vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py` @ 0cfdd2e, and SGLang
`python/sglang/srt/models/dflash.py` @ 003b23d, `python/sglang/srt/speculative/dflash_utils.py` @ 00731f0 and
`dflash_worker.py` @ 0468412 (see `hf_specdec/drafting/dflash_format.py`). Serve the folder as README.md's
"Serving with vLLM or SGLang" shows: vLLM `num_speculative_tokens` = block_size - 1, SGLang
`--speculative-num-draft-tokens` = block_size.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from hf_specdec import BlockDrafter, BlockDrafterConfig, load_drafter
from hf_specdec.models.block_drafter.dflash_format import export_dflash, is_dflash_config


def load_block_drafter(path: str) -> BlockDrafter:
    """The drafter at `path` (ours, DCOCO, DBLAST or a DFlash checkpoint); anything else exits with a clear error."""
    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise SystemExit(f"cannot read a drafter config at {path}: {err}") from err
    if not isinstance(config, BlockDrafterConfig) and not is_dflash_config(config.to_dict()):
        raise SystemExit(
            f"{path} is not a block drafter (its config says model_type {config.model_type!r}); "
            "export_drafter.py exports hf_specdec drafters (block, DCOCO, DBLAST) and DFlash checkpoints."
        )
    return load_drafter(path).eval()


def same_drafter(a: BlockDrafter, b: BlockDrafter) -> bool:
    """Same block size, mask, taps, draft vocabulary and backbone weights (b may lack a's DCOCO/DBLAST head)."""
    keys = ("block_size", "mask_token_id", "target_layer_ids", "draft_vocab_size")
    if any(getattr(a.config, k) != getattr(b.config, k) for k in keys):
        return False
    ours, theirs = a.state_dict(), b.state_dict()
    return set(theirs) <= set(ours) and all(torch.equal(ours[name], t) for name, t in theirs.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drafter", required=True, help="hf_specdec drafter folder or Hub id")
    parser.add_argument("--output", required=True, help="new (or empty) folder for the DFlash-layout checkpoint")
    parser.add_argument("--target", default=None, help="the target model; needed when the drafter has a draft vocab")
    args = parser.parse_args()
    logging.basicConfig(format="%(levelname)s %(message)s", level=logging.WARNING)
    out = Path(args.output)
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} is not empty; choose a new folder (old files would mix with the export)")
    drafter = load_block_drafter(args.drafter)
    target = None
    if args.target is not None:
        target = AutoModelForCausalLM.from_pretrained(args.target, dtype=drafter.dtype).eval()
    elif drafter.config.draft_vocab_size is not None:
        raise SystemExit(
            f"this drafter scores a {drafter.config.draft_vocab_size}-token draft vocabulary; pass --target PATH so "
            "the export can include those rows of the target's LM head (vLLM needs them)."
        )
    export_dflash(drafter, out, target=target)
    if not same_drafter(drafter, load_drafter(out)):
        raise SystemExit(f"{out} does not load back as the same drafter; please report this as a bug")
    cfg = drafter.config
    print(
        f"wrote {out}: DFlash layout, block {cfg.block_size} (vLLM num_speculative_tokens {cfg.block_size - 1}, "
        f"SGLang --speculative-num-draft-tokens {cfg.block_size}), taps {cfg.target_layer_ids}, "
        f"mask id {cfg.mask_token_id}, draft vocabulary {cfg.draft_vocab_size or 'full'}"
    )


if __name__ == "__main__":
    main()
