"""Export a drafter in a published layout, to serve it with vLLM, SGLang or TensorRT-LLM: a block drafter as z-lab's
DFlash (the default), as transformers' native DFlash (`--format native`) or as Red Hat speculators' DFlash
(`--format speculators`), a PARD drafter as AMD's PARD-1 (`--format pard`) or, when it reads target features, PARD-2
(`--format pard2`).

    python scripts/export_drafter.py --format pard --drafter drafters/qwen2.5-coder-1.5b-pard --output exported/pard

    python scripts/export_drafter.py --drafter runs/qwen1.5b-b8/drafter --output exported/qwen2.5-coder-1.5b-dflash \\
        --target ~/.cache/hf_specdec/models/qwen2.5-coder-1.5b

Writes OUTPUT/config.json (`"architectures": ["DFlashDraftModel"]`, `block_size`, `dflash_config` with
`mask_token_id` and `target_layer_ids`) and OUTPUT/model.safetensors (`fc`, `hidden_norm`, `layers.N.*`, `norm`),
reloads the folder with hf_specdec and checks that it gives back the same drafter
(`hf_specdec.models.formats.dflash_export.export_and_check`).

- A drafter with a reduced draft vocabulary (`draft_vocab_size`, as the shipped one has) needs `--target`: the
  export adds `d2t`/`t2d` and the target LM-head rows it scores (`lm_head.weight`), which is how vLLM's DFlash
  loader reads a reduced vocabulary. SGLang ignores those tensors and drafts over the full vocabulary.
- DCOCO and DBLAST drafters: only their block backbone is exported, with a warning; the corrector and the mixture
  head are not part of the DFlash layout, so vLLM and SGLang draft with the backbone alone.
- Anything else (a target model, an unrelated checkpoint) is refused.
- `--format native` writes transformers' `muse_glimmer_assistant` layout (`encoder.fc`, `encoder.output_norm_enc`,
  top-level `block_size`/`mask_token_id`/`target_layer_ids`), which `transformers.AutoModel` loads as
  `MuseGlimmerAssistantModel` for `generate(assistant_model=..., speculation_type="dflash")`
  (`hf_specdec.models.formats.native_dflash`).
- `--format speculators` (needs `--target`) writes what speculators' DFlash converter writes: `speculators_config`,
  `aux_hidden_state_layer_ids` (the taps + 1) and the target's embeddings and LM head (`hf_specdec.models.formats.
  speculators`); vLLM's speculators reader takes the method, the verifier and num_speculative_tokens from it (read
  from vLLM's `transformers_utils/configs/speculators/`, not run here).
- `--format pard` writes the PARD drafter's LM (a LoRA adapter merged) under its own architecture with `pard_token`
  and `spd_type` and the base's tokenizer files (`hf_specdec.models.formats.pard.export_and_check_pard`);
  `transformers.AutoModelForCausalLM` loads it as a plain LM. `--format pard2` adds the `pard2_*` keys and
  `warp_model.bin` (the target-feature projection) for a PARD drafter with feature injection.

Layout checked against vLLM `vllm/model_executor/models/qwen3_dflash.py` @ 036a00d, `vllm/config/speculative.py`
@ 002e77c, `vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py` @ 0cfdd2e, and SGLang
`python/sglang/srt/models/dflash.py` @ 003b23d, `python/sglang/srt/speculative/dflash_utils.py` @ 00731f0 and
`dflash_worker.py` @ 0468412 (see `hf_specdec/models/formats/dflash.py`). Serve the folder as README.md's
"Serving with vLLM or SGLang" shows: vLLM `num_speculative_tokens` = block_size - 1, SGLang
`--speculative-num-draft-tokens` = block_size.
"""

from __future__ import annotations

import argparse
import logging

from command_line import HelpFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--drafter", required=True, help="hf_specdec drafter folder or Hub id")
    parser.add_argument("--output", required=True, help="new (or empty) folder for the exported checkpoint")
    parser.add_argument(
        "--format",
        default="dflash",
        choices=["dflash", "native", "speculators", "pard", "pard2"],
        help="dflash (z-lab's, a block drafter), native (transformers' DFlash), speculators (Red Hat's DFlash), "
        "pard (PARD-1) or pard2 (PARD-2: a PARD drafter with target features)",
    )
    parser.add_argument(
        "--target", default=None, help="the target model; needed for speculators and when the drafter has a draft vocab"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from hf_specdec.models.formats.dflash_export import export_and_check  # torch: after the arguments
    from hf_specdec.models.formats.pard import export_and_check_pard

    logging.basicConfig(format="%(levelname)s %(message)s", level=logging.WARNING)
    try:
        if args.format in ("pard", "pard2"):
            export_and_check_pard(args.drafter, args.output, args.format)
        else:
            export_and_check(args.drafter, args.output, target_path=args.target, format=args.format)
    except ValueError as err:  # not a drafter, non-empty output, missing --target, failed round trip
        raise SystemExit(str(err)) from None


if __name__ == "__main__":
    main()
