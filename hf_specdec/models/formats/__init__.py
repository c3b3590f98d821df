"""Published drafter layouts, one module each: a reader (registered with `registry.register_format`, so the base it
maps onto reads such checkpoints in `from_pretrained`) and a writer (our drafters in that layout, for the serving
engines that read it). Importing this package registers every reader.

Formats map onto bases and heads; they never go into a base's modeling files."""

from pathlib import Path

from . import dflash, native_dflash, pard, speculators  # each registers its reader

WRITERS = {
    "dflash": dflash.export_dflash,
    "native": native_dflash.export_native_dflash,
    "speculators": speculators.export_speculators,
    "pard": pard.export_pard1,
    "pard2": pard.export_pard2,
}


def export_drafter(drafter, folder: str | Path, format: str, **options) -> Path:
    """Write `drafter` to `folder` in a published layout: "dflash" (z-lab's, a block drafter; `target=` when it
    scores a reduced draft vocabulary), "native" (transformers' `muse_glimmer_assistant`, a block drafter; `target=`
    optional), "speculators" (Red Hat speculators' DFlash, a block drafter; `target=` required: the layout ships its
    embeddings and LM head), "pard" (PARD-1: a PARD drafter's LM with its mask id) or "pard2" (PARD-2: that plus the
    target-feature projection of a PARD drafter that reads target features)."""
    if format not in WRITERS:
        raise ValueError(f"no writer for format {format!r}; formats: {sorted(WRITERS)}")
    return WRITERS[format](drafter, folder, **options)


__all__ = ["WRITERS", "export_drafter"]
