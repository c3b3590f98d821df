"""A causal LM that runs some of its decoder layers: the cheaper PARD draft (docs/pard.md 5.6).

A drafter pass on a CPU costs what its weights' bytes cost to read, almost all of it in the decoder layers, so
running fewer of them cuts the pass about in proportion. Which ones matter: the first and last layers carry the most
(dropping middle layers costs least, as ShortGPT and LayerSkip found), so a drafter keeps, for example, layers 0-7
and 16-23 of a 24-layer LM, then the LM's own final norm and head. The cut drafts worse until trained;
`PardDrafter.keep_layers` records it in the drafter's config (`kept_layers`), so a saved adapter folder loads its
base LM cut the same way.
"""

from __future__ import annotations

from transformers import PreTrainedModel


def layers_to_keep(kept: int | list[int], depth: int) -> list[int]:
    """The decoder layers a cut keeps: `kept` itself (increasing ids in 0..depth-1), or the first `kept` layers;
    ValueError naming `depth` otherwise."""
    ids = list(range(kept)) if isinstance(kept, int) and not isinstance(kept, bool) else kept
    ok = isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    if not ok or not ids or ids != sorted(set(ids)) or ids[0] < 0 or ids[-1] >= depth:
        raise ValueError(
            f"kept_layers must be a count in 1..{depth} or increasing layer ids in 0..{depth - 1} (the base LM's "
            f"decoder layers), got {kept!r}"
        )
    return ids


def cut_lm_layers(lm: PreTrainedModel, kept: int | list[int]) -> None:
    """Keep the decoder layers `kept` names (`layers_to_keep`) of `lm`, in place, renumbered for the KV cache, and
    say so in its config."""
    decoder = lm.get_decoder()
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise ValueError(f"{type(lm).__name__} keeps its decoder layers outside `.layers`; it cannot be cut")
    ids = layers_to_keep(kept, len(layers))
    decoder.layers = type(layers)(layers[i] for i in ids)
    for new, layer in enumerate(decoder.layers):  # the cache indexes layers by position
        attention = getattr(layer, "self_attn", None)
        if attention is not None and hasattr(attention, "layer_idx"):
            attention.layer_idx = new
    text = lm.config.get_text_config()
    text.num_hidden_layers = len(ids)
    if getattr(text, "layer_types", None) is not None:
        text.layer_types = [text.layer_types[i] for i in ids]


__all__ = ["cut_lm_layers", "layers_to_keep"]
